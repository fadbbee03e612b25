# Multi-stage build of the haptic controller, one image per HAProxy release line: the runtime
# stage's Debian `haproxy` is what `haproxy -c` validates renders with, so it must be the fleet's
# major.minor (a different one is reported: condition ValidatorVersionMismatch).
#
#   DEBIAN_SUITE  haproxy  image tag (deploy/helm/haptic: haproxyVersion)
#   bookworm      2.6      haptic:0.1.0-dev-haproxy2.6   (the default)
#   trixie        3.0      haptic:0.1.0-dev-haproxy3.0
#
#   docker build --build-arg DEBIAN_SUITE=bookworm -t haptic:0.1.0-dev-haproxy2.6 .
#   docker build --build-arg DEBIAN_SUITE=trixie -t haptic:0.1.0-dev-haproxy3.0 .
#
# The build context is filtered by .dockerignore; tests/integration/runtime/deploy.rs checks that
# every COPY source exists, is not ignored, that the copied tree is a loadable workspace, and this
# table against the chart and the version check.
ARG DEBIAN_SUITE=bookworm

FROM rust:1.90-${DEBIAN_SUITE} AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY journal journal
COPY migrations migrations
COPY tools tools
# The demo (README command 1) is a workspace member Cargo must load; `-p haptic` does not build it.
COPY demo demo
# So is xtask (the README's `cargo xtask demo` / `cargo xtask test`), not built either.
COPY xtask xtask
# Declared [[bench]] targets must exist for Cargo to load the manifest.
COPY benches benches
RUN cargo build --release --locked -p haptic

# Runtime: the suite's haproxy for `haproxy -c` validation (built against the same glibc as the
# build stage, which used the same suite).
FROM debian:${DEBIAN_SUITE}-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends haproxy ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 haptic \
    && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin haptic \
    && mkdir -p /var/lib/haptic \
    && chown 10001:10001 /var/lib/haptic
COPY --from=build /src/target/release/haptic /usr/local/bin/haptic
USER 10001:10001
VOLUME ["/var/lib/haptic"]
EXPOSE 9090
ENTRYPOINT ["/usr/local/bin/haptic"]
CMD ["run"]
