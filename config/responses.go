package config

import (
	"strconv"
	"time"
)

// Responses configures the Responses API the gateway serves itself
// (POST /v1/responses for configured models, and the stored responses
// behind GET and DELETE /v1/responses/{id}).
type Responses struct {
	// Store is where responses made with store on are kept, with the
	// record of which tenant created each response a native provider
	// stores: memory, redis (shared by replicas) or none (store is then
	// ignored and follow-ups by previous_response_id fail; the records are
	// kept in memory). Default: redis when [redis] is set, else memory.
	Store            string   `toml:"store"`
	TTL              Duration `toml:"ttl"`                // how long a stored response (or a record) is kept; default 720h (30 days)
	MaxBytes         int64    `toml:"max_bytes"`          // the memory store's bound, the heaviest tenant evicted first; default 64 MiB
	MaxResponseBytes int      `toml:"max_response_bytes"` // a larger stored record (input, output, history) is not kept; default 4 MiB
}

func (c *Config) setResponsesDefaults() {
	r := &c.Responses
	if r.Store == "" {
		r.Store = "memory"
		if c.Redis != nil {
			r.Store = "redis"
		}
	}
	setDur(&r.TTL, 720*time.Hour)
	if r.MaxBytes == 0 {
		r.MaxBytes = 64 << 20
	}
	setInt(&r.MaxResponseBytes, 4<<20)
	for i := range c.Providers {
		setStr(&c.Providers[i].Responses, "translate")
	}
}

func (c *Config) validateResponses(p *problems, o *origin) {
	p.checkEnum("responses.store", c.Responses.Store, "memory", "redis", "none")
	if c.Responses.Store == "redis" && c.Redis == nil {
		p.add("responses.store", "redis needs a [redis] section")
	}
	p.checkPositive("responses.max_bytes", c.Responses.MaxBytes)
	p.checkPositive("responses.max_response_bytes", int64(c.Responses.MaxResponseBytes))
	p.checkPositive("responses.ttl", int64(c.Responses.TTL))
	for i, pr := range c.Providers {
		p.checkEnum("providers["+strconv.Itoa(o.provider(i))+"].responses", pr.Responses, "translate", "native")
	}
}
