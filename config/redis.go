package config

import (
	"fmt"
	"net"
	"strconv"
)

// Redis configures the state replicas share: one server (mode "single"), a
// Redis Cluster ("cluster") or a master found through Sentinel
// ("sentinel").
type Redis struct {
	Mode       string   `toml:"mode"`        // single | cluster | sentinel; default single
	Addr       string   `toml:"addr"`        // single: host:port; may be ${ENV}
	Addrs      []string `toml:"addrs"`       // cluster: seed nodes; sentinel: the sentinels; may be ${ENV}
	MasterName string   `toml:"master_name"` // sentinel: the monitored master's name
	Username   string   `toml:"username"`    // ACL user of the data nodes
	Password   string   `toml:"password"`    // may be ${ENV}
	// SentinelUsername and SentinelPassword authenticate to the sentinels
	// themselves (requirepass in sentinel.conf), not to the master.
	SentinelUsername string   `toml:"sentinel_username"`
	SentinelPassword string   `toml:"sentinel_password"` // may be ${ENV}
	DB               int      `toml:"db"`                // single and sentinel; a cluster has only db 0
	Timeout          Duration `toml:"timeout"`           // per call; default 200ms
	Prefix           string   `toml:"prefix"`            // key prefix; default "gw:"
	TLS              RedisTLS `toml:"tls"`
}

// RedisTLS turns on TLS to every Redis node (and sentinel). Files are PEM
// and are read once at start.
type RedisTLS struct {
	Enabled            bool   `toml:"enabled"`
	CAFile             string `toml:"ca_file"`              // trust these CAs instead of the system's
	CertFile           string `toml:"cert_file"`            // client certificate, with key_file
	KeyFile            string `toml:"key_file"`             // client key, with cert_file
	ServerName         string `toml:"server_name"`          // name to verify; default: the address's host
	InsecureSkipVerify bool   `toml:"insecure_skip_verify"` // testing only
}

// validate reports what the mode needs and what it cannot use; r may be nil.
func (r *Redis) validate(p *problems) {
	if r == nil {
		return
	}
	p.checkPositive("redis.timeout", int64(r.Timeout))
	p.checkEnum("redis.mode", r.Mode, "single", "cluster", "sentinel")
	switch r.Mode {
	case "single":
		if r.Addr == "" {
			p.add("redis.addr", "required")
		} else if !hostPort(r.Addr) {
			p.add("redis.addr", "must be host:port, not %q", r.Addr)
		}
		if len(r.Addrs) > 0 {
			p.add("redis.addrs", `only for mode "cluster" or "sentinel" (a single server is addr)`)
		}
	case "cluster", "sentinel":
		if r.Addr != "" {
			p.add("redis.addr", "only for mode \"single\" (mode %q lists addrs)", r.Mode)
		}
		if len(r.Addrs) == 0 {
			p.add("redis.addrs", "required for mode %q", r.Mode)
		}
		for i, a := range r.Addrs {
			if !hostPort(a) {
				p.add(fmt.Sprintf("redis.addrs[%d]", i), "must be host:port, not %q", a)
			}
		}
	}
	if r.DB < 0 {
		p.add("redis.db", "must not be negative")
	}
	if r.Mode == "cluster" && r.DB != 0 {
		p.add("redis.db", "a Redis Cluster has only db 0")
	}
	if (r.MasterName == "") == (r.Mode == "sentinel") {
		if r.MasterName == "" {
			p.add("redis.master_name", `required for mode "sentinel"`)
		} else {
			p.add("redis.master_name", `only for mode "sentinel"`)
		}
	}
	if r.Mode != "sentinel" && (r.SentinelUsername != "" || r.SentinelPassword != "") {
		p.add("redis.sentinel_password", `only for mode "sentinel"`)
	}
	t := r.TLS
	if (t.CertFile == "") != (t.KeyFile == "") {
		p.add("redis.tls.cert_file", "cert_file and key_file go together")
	}
	if !t.Enabled && (t.CAFile != "" || t.CertFile != "" || t.ServerName != "" || t.InsecureSkipVerify) {
		p.add("redis.tls.enabled", "TLS options are set but enabled is false")
	}
}

// hostPort reports whether a is host:port with a port number, as the Redis
// client dials it ("nohostport" would fail every call at run time).
func hostPort(a string) bool {
	_, port, err := net.SplitHostPort(a) // ":6379" is the local host, as the client reads it
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n > 0 && n < 1<<16
}
