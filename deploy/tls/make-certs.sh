#!/usr/bin/env bash
# Make a private CA and the certificates of a TLS Dask cluster (mutual TLS: every role
# presents a certificate signed by this CA, and Dask refuses peers that do not).
#
#   deploy/tls/make-certs.sh [OUT_DIR]        # default: deploy/tls/certs (git-ignored)
#
# OUT_DIR/
#   ca.pem                              CA certificate: every role needs it
#   scheduler.pem   scheduler-key.pem   for `dask scheduler`
#   worker.pem      worker-key.pem      for `dask worker`
#   client.pem      client-key.pem      for clients: dhash, Jupyter, the job runner
#   private/ca-key.pem                  CA key: keep it off the cluster (not in any Secret)
#
# The file names match deploy/dask-tls.yaml (files under /etc/dask/tls in the containers);
# `kubectl create secret generic dhash-dask-tls --from-file=OUT_DIR` takes the top-level
# files only, so the CA key in private/ stays out of the Secret.
#
# An existing CA in OUT_DIR is reused (run again to re-issue the role certificates);
# delete OUT_DIR to start over. Settings (environment):
#   DHASH_TLS_DAYS   validity of the role certificates in days (default 365; CA: 3650)
#   DHASH_TLS_SANS   subjectAltName of the role certificates (Dask does not check host
#                    names, it authenticates by CA; the names are for other tools)
set -euo pipefail

command -v openssl >/dev/null || { echo "make-certs.sh: openssl not found (apt-get install openssl)" >&2; exit 1; }

OUT=${1:-"$(cd "$(dirname "$0")" && pwd)/certs"}
DAYS=${DHASH_TLS_DAYS:-365}
SANS=${DHASH_TLS_SANS:-"DNS:localhost,DNS:scheduler,DNS:dhash-scheduler,IP:127.0.0.1"}

umask 077                       # private keys: owner only
mkdir -p "$OUT/private"
chmod 755 "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# EC P-256 keys: small and fast; supported by every OpenSSL >= 1.1.1 and Python's ssl.
KEYOPTS=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)

if [ ! -s "$OUT/private/ca-key.pem" ] || [ ! -s "$OUT/ca.pem" ]; then
  openssl req -x509 "${KEYOPTS[@]}" -sha256 -days 3650 \
    -subj "/CN=dhash-dask-ca" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -addext "subjectKeyIdentifier=hash" \
    -keyout "$OUT/private/ca-key.pem" -out "$OUT/ca.pem" 2>/dev/null
  echo "make-certs.sh: new CA $OUT/ca.pem"
fi

cat > "$TMP/leaf.ext" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid
subjectAltName=$SANS
EOF

# Every role both listens and connects (the scheduler dials workers, workers dial each
# other), so each certificate is valid for server and client authentication.
for role in scheduler worker client; do
  openssl req "${KEYOPTS[@]}" -sha256 -subj "/CN=dhash-dask-$role" \
    -keyout "$OUT/$role-key.pem" -out "$TMP/$role.csr" 2>/dev/null
  openssl x509 -req -sha256 -days "$DAYS" -in "$TMP/$role.csr" \
    -CA "$OUT/ca.pem" -CAkey "$OUT/private/ca-key.pem" \
    -CAserial "$OUT/private/ca.srl" -CAcreateserial \
    -extfile "$TMP/leaf.ext" -out "$OUT/$role.pem" 2>/dev/null
  chmod 644 "$OUT/$role.pem"
  chmod 600 "$OUT/$role-key.pem"
  openssl verify -CAfile "$OUT/ca.pem" "$OUT/$role.pem" >/dev/null
done
chmod 644 "$OUT/ca.pem"

echo "make-certs.sh: wrote ca.pem and scheduler/worker/client certificates to $OUT (keys mode 600)"
