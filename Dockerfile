# syntax=docker/dockerfile:1
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/gateway ./cmd/gateway

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gateway /gateway
COPY config.toml /etc/llmgw/config.toml
USER nonroot:nonroot
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=2s --retries=3 CMD ["/gateway", "-healthcheck", "http://127.0.0.1:8080/healthz"]
ENTRYPOINT ["/gateway", "-config", "/etc/llmgw/config.toml", "-listen", "0.0.0.0:8080"]
