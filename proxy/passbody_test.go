package proxy

import (
	"bytes"
	"errors"
	"mime/multipart"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/pipeline"
)

// FuzzJSONModel: the model the policy judges is the one model an upstream
// reads, whichever JSON parser it uses.
func FuzzJSONModel(f *testing.F) {
	for _, s := range []string{`{"model":"a","input":"x"}`, `{"model":"a","model":"b"}`, `{"mod\u0065l":"b"}`, `{"input":1}`, `[1]`, `{"model":null}`, `{"model":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		model, err := jsonModel(body)
		if err != nil || model == "" {
			return
		}
		n := 0
		gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool {
			if k.Str == "model" {
				n++
				if v.Str != model {
					t.Fatalf("jsonModel(%q) = %q, but a model key says %q", body, model, v.Str)
				}
			}
			return true
		})
		if n != 1 {
			t.Fatalf("jsonModel(%q) = %q with %d model keys", body, model, n)
		}
		if len(model) > maxModelField {
			t.Fatalf("jsonModel accepted a model of %d bytes", len(model))
		}
	})
}

// A model name a client chooses is bounded: an unconfigured one passed
// through keys the limits' state and the usage records.
func TestModelNamesAreBounded(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("m", maxModelField+1)
	if _, err := jsonModel([]byte(`{"model":"` + long + `","input":"x"}`)); err == nil {
		t.Error("jsonModel accepted a model name over the bound")
	}
	if m, err := jsonModel([]byte(`{"model":"` + long[1:] + `","input":"x"}`)); err != nil || m != long[1:] {
		t.Errorf("jsonModel refused a model name at the bound: %v", err)
	}
	if _, err := parseChat([]byte(`{"model":"` + long + `","messages":[{"role":"user"}]}`)); err == nil {
		t.Error("parseChat accepted a model name over the bound")
	}
}

// FuzzFormModel: a multipart body's model field is found, and renaming it
// changes that field only.
func FuzzFormModel(f *testing.F) {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	_ = w.SetBoundary("XyZ")
	_ = w.WriteField("model", "gpt-x")
	fw, _ := w.CreateFormFile("file", "a.wav")
	_, _ = fw.Write([]byte("RIFF"))
	_ = w.Close()
	f.Add(b.Bytes(), "XyZ")
	f.Add([]byte("--XyZ\r\n\r\n--XyZ--"), "XyZ")
	f.Fuzz(func(t *testing.T, body []byte, boundary string) {
		model, err := formModel(body, boundary)
		if err != nil || model == "" || boundary == "" {
			return
		}
		out, err := setFormModel(body, boundary, "renamed")
		if err != nil {
			return
		}
		if got, err := formModel(out, boundary); err != nil || got != "renamed" {
			t.Fatalf("after renaming %q: %q, %v", model, got, err)
		}
	})
}

// A body whose one model key is in another case is told how to spell it:
// "model must appear once" read as nonsense for a body with one key (a
// tenant probe).
func TestModelKeyInAnotherCaseMessage(t *testing.T) {
	t.Parallel()
	for _, body := range []string{`{"Model":"m"}`, `{"MODEL":"m","input":"x"}`, `{"model":"m","model":"n"}`} {
		_, err := jsonModel([]byte(body))
		var pe *pipeline.Error
		if !errors.As(err, &pe) || pe.Param != "model" || !strings.Contains(pe.Message, `"model" exactly`) {
			t.Errorf("%s: %v", body, err)
		}
	}
}
