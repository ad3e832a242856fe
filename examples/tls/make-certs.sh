#!/usr/bin/env bash
# Makes a CA and the certificates of the 3-node TLS example (examples/tls/n1.toml ... n3.toml):
#
#   examples/tls/make-certs.sh examples/tls/certs
#
# writes into DIR (created if needed):
#   ca.crt, ca.key            the example CA (keep ca.key private; it signs everything below)
#   n1.crt/key ... n3.crt/key one certificate per node, for its client port and its peer port
#                             (CN and DNS SAN nN, the member name; DNS localhost; IP 127.0.0.1)
#   client.crt, client.key    a client certificate, CN "root" (with auth on, the root user)
#
# Uses the openssl command line tool (Debian: apt-get install -y openssl). EC P-256 keys,
# valid for 825 days. Never commit the keys: examples/tls/.gitignore keeps certs/ out.
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 DIR   (e.g. $0 examples/tls/certs)" >&2
    exit 2
fi
command -v openssl >/dev/null || { echo "$0: openssl is not installed (apt-get install -y openssl)" >&2; exit 1; }

dir=$1
mkdir -p "$dir"
cd "$dir"
days=825

newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; chmod 600 "$1"; }

newkey ca.key
openssl req -x509 -new -key ca.key -sha256 -days "$days" -subj "/CN=leasekv example CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out ca.crt

# sign NAME CN SAN EKU
sign() {
    local name=$1 cn=$2 san=$3 eku=$4
    newkey "$name.key"
    openssl req -new -key "$name.key" -subj "/CN=$cn" -out "$name.csr"
    cat > "$name.ext" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=$eku
subjectAltName=$san
EXT
    openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 -days "$days" \
        -extfile "$name.ext" -out "$name.crt" 2>/dev/null
    rm -f "$name.csr" "$name.ext"
}

for n in 1 2 3; do
    sign "n$n" "n$n" "DNS:n$n,DNS:localhost,IP:127.0.0.1" "serverAuth,clientAuth"
done
sign client root "DNS:client" "clientAuth"
rm -f ca.srl
echo "wrote a CA, n1..n3 and a client certificate into $dir"
