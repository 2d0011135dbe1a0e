package guardrails

import (
	"bytes"
	"context"
	"errors"

	"github.com/llmgw/gateway/jsonedit"
	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/pipeline"
	"github.com/tidwall/gjson"
)

// checkRequest runs the request stage over every message's text (a string
// content, or the text of its parts). It returns the body with redactions,
// or nil when nothing changed; a block is the 400 content_blocked envelope.
func checkRequest(ctx context.Context, ck *checker, body []byte) ([]byte, error) {
	var edits []jsonedit.Edit
	var failed error
	check := func(v gjson.Result, more bool) bool {
		judge := ck.Check
		if more {
			judge = ck.CheckMore
		}
		out, err := judge([]byte(v.Str))
		if err != nil {
			failed = err
			return false
		}
		if !bytes.Equal(out, []byte(v.Str)) {
			var ok bool
			if edits, ok = jsonedit.ReplaceValue(edits, body, v, jsonstring.Append(nil, string(out))); !ok {
				failed = pipeline.Internal(errors.New("guardrails: a text's position is unknown"), "the request could not be redacted")
				return false
			}
		}
		return true
	}
	gjson.GetBytes(body, "messages").ForEach(func(_, m gjson.Result) bool {
		c := m.Get("content")
		switch {
		case c.Type == gjson.String:
			return check(c, false)
		case c.IsArray():
			// The parts are one message: max_length counts them together.
			more := false
			c.ForEach(func(_, part gjson.Result) bool {
				if t := part.Get("text"); t.Type == gjson.String {
					ok := check(t, more)
					more = true
					return ok
				}
				return true
			})
		}
		return failed == nil
	})
	return applyEdits(body, edits, failed, "the request could not be redacted")
}

// messageTexts returns the text of every message of a chat body (a string
// content, or its parts' texts), each followed by a newline.
func messageTexts(body []byte) []byte {
	var out []byte
	gjson.GetBytes(body, "messages").ForEach(func(_, m gjson.Result) bool {
		c := m.Get("content")
		switch {
		case c.Type == gjson.String:
			out = append(append(out, c.Str...), '\n')
		case c.IsArray():
			c.ForEach(func(_, part gjson.Result) bool {
				if t := part.Get("text"); t.Type == gjson.String {
					out = append(append(out, t.Str...), '\n')
				}
				return true
			})
		}
		return true
	})
	return out
}

// checkAnswer runs the response stage over every choice's content of a
// chat.completion; nil when nothing changed.
func checkAnswer(ck *checker, body []byte) ([]byte, error) {
	var edits []jsonedit.Edit
	var failed error
	gjson.GetBytes(body, "choices").ForEach(func(_, ch gjson.Result) bool {
		c := ch.Get("message.content")
		if c.Type != gjson.String {
			return true
		}
		edits, failed = checkText(ck, body, c, edits, "the answer could not be redacted")
		return failed == nil
	})
	return applyEdits(body, edits, failed, "the answer could not be redacted")
}

// checkText judges v, a string of body, and adds the edit that redacts it
// to edits when the guards changed it; what names the failure of an edit.
func checkText(ck *checker, body []byte, v gjson.Result, edits []jsonedit.Edit, what string) ([]jsonedit.Edit, error) {
	text, err := ck.Check([]byte(v.Str))
	if err != nil {
		return edits, err
	}
	if !bytes.Equal(text, []byte(v.Str)) {
		var ok bool
		if edits, ok = jsonedit.ReplaceValue(edits, body, v, jsonstring.Append(nil, string(text))); !ok {
			return edits, pipeline.Internal(errors.New("guardrails: a text's position is unknown"), what)
		}
	}
	return edits, nil
}

// applyEdits returns body with the redactions made in one copy (one sjson
// write per text copied the whole body per text: a request of thousands of
// redacted parts cost seconds), nil when there is none, or failed.
func applyEdits(body []byte, edits []jsonedit.Edit, failed error, what string) ([]byte, error) {
	if failed != nil {
		return nil, asClientError(failed)
	}
	if len(edits) == 0 {
		return nil, nil
	}
	out, ok := jsonedit.Apply(body, edits)
	if !ok {
		return nil, pipeline.Internal(errors.New("guardrails: overlapping redactions"), what)
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
