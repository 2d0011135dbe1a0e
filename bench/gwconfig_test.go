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
