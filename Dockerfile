# Build: libpq is compiled from source by pq-sys (feature "bundled"), so the
# only build dependencies are OpenSSL's headers and pkg-config.
FROM rust:1.95-bookworm AS build
WORKDIR /src
RUN apt-get update \
 && apt-get install -y --no-install-recommends libssl-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
COPY Cargo.toml Cargo.lock build.rs ./
COPY src src
COPY migrations migrations
RUN cargo build --release --locked --bin charges

# Run: a small Debian with OpenSSL, a non-root user, the binary and the page.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home charges \
 && mkdir /data && chown charges /data
COPY --from=build /src/target/release/charges /usr/local/bin/charges
COPY web /app/web
# `charges serve`: demo mode off unless DEMO=true (docker-compose.yml sets it
# and publishes the port on 127.0.0.1 only). `/metrics` is on METRICS_BIND,
# 127.0.0.1:9464 inside the container unless set (e.g. 0.0.0.0:9464, not
# published, for a scraper on the container network).
ENV BIND=0.0.0.0:8080 \
    WEB_DIR=/app/web
# Without DATABASE_URL the app keeps an SQLite file here (docker-compose.yml
# sets a PostgreSQL URL instead): a volume, so that recreating the container
# keeps the keys (a retry after it must still find its key).
WORKDIR /data
VOLUME /data
USER charges
EXPOSE 8080
ENTRYPOINT ["charges"]
CMD ["serve"]
