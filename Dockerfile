# syntax=docker/dockerfile:1
# The operator image: a statically linked binary (glibc, crt-static), the CA bundle, an
# nsswitch.conf, uid 65532, nothing else: no shell, no libc, no package manager.
# `scripts/images operator` writes the same image without a Docker engine (docs/install.md).
#
#   docker build -t rancheros-operator:dev .
#   docker run --rm rancheros-operator:dev --help
#   docker run --rm -v "$PWD/channel.json:/c.json:ro" rancheros-operator:dev validate /c.json
#
# The entrypoint is the binary, so a pod's `args: [operator, ...]` or
# `args: [display, --file, ...]` runs that subcommand.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# Name resolution (json channels fetch a URL): static glibc >= 2.34 has the `files` and
# `dns` NSS services built in, so getaddrinfo needs no libnss_*.so at run time; the
# linker's "requires at runtime the shared libraries" warning does not apply to them.
# nsswitch.conf makes /etc/hosts (a pod's hostAliases) win over DNS, as in any distro
# (glibc's default without the file is "dns [!UNAVAIL=return] files").
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    target="$(rustc -vV | sed -n 's/^host: //p')" \
    && RUSTFLAGS='-C target-feature=+crt-static' \
        cargo build --release --locked --target "$target" --bin rancheros-operator \
    && cp "target/$target/release/rancheros-operator" /rancheros-operator \
    && ! readelf -d /rancheros-operator | grep -q '(NEEDED)' \
    && printf 'hosts: files dns\n' >/nsswitch.conf

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /nsswitch.conf /etc/nsswitch.conf
COPY --from=build /rancheros-operator /usr/local/bin/rancheros-operator
ENV PATH=/usr/local/bin \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/rancheros-operator"]
