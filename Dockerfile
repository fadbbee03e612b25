# Multi-stage build of the haptic controller (deploy/statefulset.yaml runs it as `haptic:0.1.0-dev`,
# the workspace version). Build:  docker build -t haptic:0.1.0-dev .
# The build context is filtered by .dockerignore; tests/integration/runtime/deploy.rs checks that
# every COPY source exists, is not ignored, and that the copied tree is a loadable workspace.

FROM rust:1.90-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY journal journal
COPY migrations migrations
COPY tools tools
# The demo (README command 1) is a workspace member Cargo must load; `-p haptic` does not build it.
COPY demo demo
# Declared [[bench]] targets must exist for Cargo to load the manifest.
COPY benches benches
RUN cargo build --release --locked -p haptic

# Runtime: Debian's haproxy for `haproxy -c` validation (the same 2.6 the corpus is checked with).
FROM debian:bookworm-slim
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
