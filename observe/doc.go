// Package observe holds the gateway's Prometheus registry and the access log.
// Every package registers its metrics in Registry so that /metrics exposes
// them all and tests that build several gateways in one process do not
// register a collector twice.
package observe
