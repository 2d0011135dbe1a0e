package guardrails

import (
	"bytes"
	"context"
	"errors"
	"strconv"

	"github.com/llmgw/gateway/pipeline"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// checkRequest runs the request stage over every message's text (a string
// content, or the text of its parts). It returns the body with redactions,
// or nil when nothing changed; a block is the 400 content_blocked envelope.
func checkRequest(ctx context.Context, ck *checker, body []byte) ([]byte, error) {
	type edit struct {
		path string
		text []byte
	}
	var edits []edit
	var failed error
	check := func(p string, v gjson.Result) {
		out, err := ck.Check([]byte(v.Str))
		if err != nil {
			failed = err
			return
		}
		if !bytes.Equal(out, []byte(v.Str)) {
			edits = append(edits, edit{p, append([]byte(nil), out...)})
		}
	}
	i := 0
	gjson.GetBytes(body, "messages").ForEach(func(_, m gjson.Result) bool {
		at := "messages." + strconv.Itoa(i)
		i++
		c := m.Get("content")
		switch {
		case c.Type == gjson.String:
			check(at+".content", c)
		case c.IsArray():
			j := 0
			c.ForEach(func(_, part gjson.Result) bool {
				if t := part.Get("text"); t.Type == gjson.String {
					check(at+".content."+strconv.Itoa(j)+".text", t)
				}
				j++
				return failed == nil
			})
		}
		return failed == nil
	})
	if failed != nil {
		return nil, asClientError(failed)
	}
	if len(edits) == 0 {
		return nil, nil
	}
	for _, e := range edits {
		var err error
		if body, err = sjson.SetBytes(body, e.path, string(e.text)); err != nil {
			return nil, pipeline.Internal(err, "the request could not be redacted")
		}
	}
	return body, nil
}

// checkAnswer runs the response stage over every choice's content of a
// chat.completion; nil when nothing changed.
func checkAnswer(ck *checker, body []byte) ([]byte, error) {
	out := body
	changed := false
	var failed error
	i := 0
	gjson.GetBytes(body, "choices").ForEach(func(_, ch gjson.Result) bool {
		at := "choices." + strconv.Itoa(i) + ".message.content"
		i++
		c := ch.Get("message.content")
		if c.Type != gjson.String {
			return true
		}
		text, err := ck.Check([]byte(c.Str))
		if err != nil {
			failed = err
			return false
		}
		if !bytes.Equal(text, []byte(c.Str)) {
			if out, err = sjson.SetBytes(out, at, string(text)); err != nil {
				failed = pipeline.Internal(err, "the answer could not be redacted")
				return false
			}
			changed = true
		}
		return true
	})
	if failed != nil {
		return nil, asClientError(failed)
	}
	if !changed {
		return nil, nil
	}
	return out, nil
}

// asClientError turns a *Blocked into its envelope; other errors pass.
func asClientError(err error) error {
	var b *Blocked
	if errors.As(err, &b) {
		return b.clientError()
	}
	return err
}
