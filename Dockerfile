# The operator image. Same recipe as scripts/images (used where no Docker engine runs):
# a statically linked binary (glibc, crt-static), the CA bundle, uid 65532, nothing else.
#
#   docker build -t rancheros-operator:dev .
#   docker run --rm rancheros-operator:dev --help
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN RUSTFLAGS='-C target-feature=+crt-static' \
        cargo build --release --target x86_64-unknown-linux-gnu --bin rancheros-operator \
    && cp target/x86_64-unknown-linux-gnu/release/rancheros-operator /rancheros-operator \
    && ! readelf -d /rancheros-operator | grep -q '(NEEDED)'

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /rancheros-operator /usr/local/bin/rancheros-operator
ENV PATH=/usr/local/bin \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/rancheros-operator"]
