package policies

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
	"github.com/rs/zerolog"
)

const (
	keyAlpha = "sk-alpha-0123456789"
	keyBeta  = "sk-beta-9876543210"
	keyGamma = "sk-gamma-hashed-only"
)

func hexSum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func keyedConfig() *config.Config {
	return &config.Config{
		Keys: []config.Key{
			{Name: "alpha-ci", Tenant: "alpha", Key: keyAlpha},
			{Name: "beta-main", Tenant: "beta", Key: keyBeta},
			{Name: "gamma-hashed", Tenant: "gamma", SHA256: strings.ToUpper(hexSum(keyGamma))},
		},
	}
}

func mustNew(t testing.TB, cfg *config.Config) *Engine {
	t.Helper()
	e, err := New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	keyed := mustNew(t, keyedConfig())
	open := mustNew(t, &config.Config{})

	tests := []struct {
		name       string
		engine     *Engine
		credential string
		tenant     string // "" = expect a 401
		keyName    string
	}{
		{name: "open gateway, no credential", engine: open, credential: "", tenant: DefaultTenant},
		{name: "open gateway, any credential", engine: open, credential: "sk-whatever", tenant: DefaultTenant},
		{name: "valid raw key", engine: keyed, credential: keyAlpha, tenant: "alpha", keyName: "alpha-ci"},
		{name: "key of another tenant", engine: keyed, credential: keyBeta, tenant: "beta", keyName: "beta-main"},
		{name: "valid sha256-configured key", engine: keyed, credential: keyGamma, tenant: "gamma", keyName: "gamma-hashed"},
		{name: "wrong key", engine: keyed, credential: "sk-alpha-0123456780"},
		{name: "key with extra byte", engine: keyed, credential: keyAlpha + " "},
		{name: "the configured digest is not a key", engine: keyed, credential: hexSum(keyGamma)},
		{name: "empty", engine: keyed, credential: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tt.engine.Authenticate(tt.credential)
			if tt.tenant == "" {
				var pe *pipeline.Error
				if !errors.As(err, &pe) {
					t.Fatalf("err = %v, want *pipeline.Error", err)
				}
				if got != nil {
					t.Fatalf("tenant = %+v on failure", got)
				}
				if pe.Status != 401 || pe.Type != "invalid_request_error" || pe.Code != "invalid_api_key" || pe.Param != "" {
					t.Fatalf("envelope = %d %q %q %q", pe.Status, pe.Type, pe.Code, pe.Param)
				}
				if tt.credential != "" && strings.Contains(pe.Message, tt.credential) {
					t.Fatalf("message echoes the key: %q", pe.Message)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if got.Name != tt.tenant || got.Key != tt.keyName {
				t.Fatalf("tenant = %q key %q, want %q key %q", got.Name, got.Key, tt.tenant, tt.keyName)
			}
			if p := PolicyOf(got); p == nil || p.Tenant != tt.tenant {
				t.Fatalf("policy = %+v, want tenant %q", p, tt.tenant)
			}
		})
	}
}

func TestAuthenticateMessages(t *testing.T) {
	t.Parallel()
	e := mustNew(t, keyedConfig())
	_, missing := e.Authenticate("")
	_, wrong := e.Authenticate("sk-nope")
	if !strings.Contains(missing.Error(), "didn't provide an API key") {
		t.Errorf("missing key message = %q", missing)
	}
	if !strings.Contains(wrong.Error(), "Incorrect API key provided") || strings.Contains(wrong.Error(), "sk-nope") {
		t.Errorf("wrong key message = %q", wrong)
	}
}

func TestNewLogsOpenGateway(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		cfg      *config.Config
		wantWarn bool
	}{
		{name: "no keys", cfg: &config.Config{}, wantWarn: true},
		{name: "keys", cfg: keyedConfig(), wantWarn: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			e, err := New(tt.cfg, zerolog.New(&buf).Level(zerolog.WarnLevel))
			if err != nil {
				t.Fatal(err)
			}
			if e.Open() != tt.wantWarn {
				t.Errorf("Open() = %v", e.Open())
			}
			warned := strings.Count(buf.String(), "gateway is open")
			if (warned == 1) != tt.wantWarn || warned > 1 {
				t.Errorf("open-gateway warnings = %d in %q", warned, buf.String())
			}
			if strings.Contains(buf.String(), keyAlpha) {
				t.Errorf("log contains a secret: %q", buf.String())
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  config.Config
		want string
	}{
		{name: "key without tenant", cfg: config.Config{Keys: []config.Key{{Key: "k"}}}, want: "keys[0].tenant"},
		{name: "key and sha256", cfg: config.Config{Keys: []config.Key{{Tenant: "a", Key: "k", SHA256: hexSum("k")}}}, want: "keys[0]: set only one"},
		{name: "neither key nor sha256", cfg: config.Config{Keys: []config.Key{{Tenant: "a"}}}, want: "keys[0]: set key or sha256"},
		{name: "short sha256", cfg: config.Config{Keys: []config.Key{{Tenant: "a", SHA256: "abcd"}}}, want: "keys[0].sha256"},
		{name: "same secret twice", cfg: config.Config{Keys: []config.Key{
			{Tenant: "a", Key: "k"}, {Tenant: "b", SHA256: hexSum("k")},
		}}, want: "keys[1]: same secret as keys[0]"},
		{name: "the admin key's secret", cfg: config.Config{Server: config.Server{AdminKey: "adm"}, Keys: []config.Key{
			{Tenant: "a", Key: "k"}, {Tenant: "b", SHA256: hexSum("adm")},
		}}, want: "keys[1]: same secret as server.admin_key"},
		{name: "duplicate policy", cfg: config.Config{Policies: []config.Policy{{Tenant: "*"}, {Tenant: "*"}}}, want: "policies[1]: tenant \"*\" already has policies[0]"},
		{name: "bad glob", cfg: config.Config{
			Keys:     []config.Key{{Tenant: "a", Key: "k"}},
			Policies: []config.Policy{{Tenant: "a", Models: []string{"gpt-["}}},
		}, want: "policies[0].models[0]"},
		{name: "bad default glob", cfg: config.Config{Policies: []config.Policy{{Tenant: "*", Tools: []string{"ok", "\\"}}}}, want: "tools[1]"},
		{name: "bad mode", cfg: config.Config{Policies: []config.Policy{{Tenant: "*", MaxTokens: 5, MaxTokensMode: "truncate"}}}, want: "max_tokens_mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(&tt.cfg, zerolog.Nop())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// Two Engines from different configs coexist (hot reload swaps them).
func TestEnginesAreIndependent(t *testing.T) {
	t.Parallel()
	a := mustNew(t, &config.Config{Keys: []config.Key{{Tenant: "a", Key: "ka"}}})
	b := mustNew(t, &config.Config{Keys: []config.Key{{Tenant: "b", Key: "kb"}}})
	if ta, err := a.Authenticate("ka"); err != nil || ta.Name != "a" {
		t.Errorf("a: %v %v", ta, err)
	}
	if _, err := a.Authenticate("kb"); err == nil {
		t.Error("a accepts b's key")
	}
	if tb, err := b.Authenticate("kb"); err != nil || tb.Name != "b" {
		t.Errorf("b: %v %v", tb, err)
	}
}

func FuzzAuthenticate(f *testing.F) {
	e := mustNew(f, keyedConfig())
	for _, s := range []string{"", keyAlpha, keyGamma, "Bearer " + keyBeta, "\x00\xff", strings.Repeat("k", 4096)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tenant, err := e.Authenticate(s)
		if (tenant == nil) == (err == nil) {
			t.Fatalf("tenant %v, err %v", tenant, err)
		}
		if err != nil && s != "" && len(s) > 3 && strings.Contains(err.Error(), s) {
			t.Fatalf("error echoes the credential: %v", err)
		}
	})
}
