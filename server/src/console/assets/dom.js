// Drawing: elements built with the DOM's own calls; every string becomes a text node, never markup.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === false || value === null || value === undefined) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "class") node.className = value;
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

export const $ = (id) => document.getElementById(id);

/** Replaces `node`'s children, leaving out the absent ones (null, undefined, false). */
export function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

export function notice(text, kind = "info") {
  const box = $("notice");
  // Errors interrupt (an alert); other news waits its turn (the region's polite status).
  box.replaceChildren(el("p", { class: kind, role: kind.includes("error") ? "alert" : null }, text));
  if (kind !== "error") setTimeout(() => box.firstChild && box.firstChild.textContent === text && box.replaceChildren(), 6000);
}

