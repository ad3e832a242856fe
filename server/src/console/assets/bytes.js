// Bytes, base64, hex and text: keys and values are bytes; the gateway carries them as base64.

export const utf8 = new TextDecoder("utf-8", { fatal: true });
export const encoder = new TextEncoder();

export function toBase64(bytes) {
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary);
}

export function fromBase64(text) {
  if (!text) return new Uint8Array(0);
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

/** The bytes as text when they are UTF-8, else null. */
export function asText(bytes) {
  try {
    return utf8.decode(bytes);
  } catch {
    return null;
  }
}

export function toHex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join(" ");
}

/** Hex as typed by a user (spaces and newlines allowed); throws on anything else. */
export function fromHex(text) {
  const digits = text.replace(/\s+/g, "");
  if (digits.length % 2 !== 0 || /[^0-9a-fA-F]/.test(digits)) {
    throw new Error("not hex: write pairs of hex digits (0-9, a-f), spaces allowed");
  }
  const bytes = new Uint8Array(digits.length / 2);
  for (let i = 0; i < bytes.length; i++) bytes[i] = parseInt(digits.substr(i * 2, 2), 16);
  return bytes;
}

/** A key or value for display: its text, or its hex marked as such. */
export function display(bytes) {
  const text = asText(bytes);
  return text === null ? { text: toHex(bytes), binary: true } : { text, binary: false };
}

/** The keys a prefix covers, as etcd's `key` and `range_end`: every key from "\0" on for the
 *  empty prefix (etcd refuses an empty key). */
export function rangeOf(prefix) {
  if (!prefix) return { key: new Uint8Array([0]), end: new Uint8Array([0]) };
  const key = encoder.encode(prefix);
  return { key, end: prefixEnd(key) };
}

/** The end of the range of every key that starts with `prefix` (etcd's prefix rule). */
export function prefixEnd(prefix) {
  const end = Uint8Array.from(prefix);
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i] < 0xff) {
      end[i] += 1;
      return end.slice(0, i + 1);
    }
  }
  return new Uint8Array([0]);
}

export function leaseHex(id) {
  return id && id !== "0" ? BigInt(id).toString(16) : "";
}

export function formatBytes(n) {
  if (n === null || n === undefined) return "?";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = Number(n);
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(unit === 0 ? 0 : 1)} ${units[unit]}`;
}

export function clock(date = new Date()) {
  return date.toLocaleTimeString([], { hour12: false });
}

