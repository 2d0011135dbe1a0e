package main

import (
	"testing"

	"github.com/llmgw/gateway/config"
)

// TestGatewayConfigValid: the config bench writes for the gateway, alone and
// with the soak's extra models, is one the gateway accepts, with the three
// providers the scenarios name.
func TestGatewayConfigValid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, extra string }{{"bench", ""}, {"soak", soakExtraModels}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path, err := writeGatewayConfig(t.TempDir(), "gw", "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", 7, connBuffers{read: 1024, write: 2048, upstreamRead: 8192})
			if err != nil {
				t.Fatal(err)
			}
			if tc.extra != "" {
				if err := appendFile(path, tc.extra); err != nil {
					t.Fatal(err)
				}
			}
			c, err := config.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Providers) != 3 || c.Providers[1].Name != "api-noretry" || *c.Providers[1].Retries != 0 ||
				*c.Providers[0].Retries == 0 || c.Providers[2].BaseURL != "http://127.0.0.1:3/v1" || c.Providers[0].MaxConns != 7 || c.Providers[2].ReadBuffer != 8192 {
				t.Fatalf("providers %+v", c.Providers)
			}
			if c.Server.ReadBuffer != 1024 || c.Server.WriteBuffer != 2048 {
				t.Fatalf("server buffers %d, %d", c.Server.ReadBuffer, c.Server.WriteBuffer)
			}
		})
	}
}

// TestGatewayVariantsDropTheirLayers: each layers-scenario variant is a
// config the gateway accepts, with exactly the layers it names: no access
// log line (log level warn), an empty request layer, no model-call
// middleware on the bench model.
func TestGatewayVariantsDropTheirLayers(t *testing.T) {
	t.Parallel()
	all := layerSet{model: true, request: true, accessLog: true}
	for _, v := range append(layerVariants, struct {
		name string
		set  layerSet
	}{"all", all}) {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			path, err := writeGatewayVariant(t.TempDir(), "gw", "127.0.0.1:1", "127.0.0.1:2", 7, fasthttpBuffers, v.set)
			if err != nil {
				t.Fatal(err)
			}
			c, err := config.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Server.LogLevel == "info"; got != v.set.accessLog {
				t.Errorf("log level %q with access log %v", c.Server.LogLevel, v.set.accessLog)
			}
			if got := len(c.Middleware.Request) > 0; got != v.set.request {
				t.Errorf("request layer %v, want on=%v", c.Middleware.Request, v.set.request)
			}
			for _, m := range c.Models {
				if m.Name == "chat" {
					if got := len(m.Middleware) > 0; got != v.set.model {
						t.Errorf("chat model layer %v, want on=%v", m.Middleware, v.set.model)
					}
				}
			}
		})
	}
}
