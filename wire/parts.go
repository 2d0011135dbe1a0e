package wire

import (
	"strconv"

	"github.com/llmgw/gateway/jsonstring"
)

// The parts of a chat object that every producer writes the same way: the
// encoders here, and the mock upstream (mockllm), which writes its own chunk
// sequences but must frame each chunk as a real upstream does.

// AppendHead appends the opening of a chat object of the given type
// ("chat.completion" or "chat.completion.chunk"): `{"id":..,"object":..,
// "created":..,"model":..`. The caller adds the other keys and the closing
// brace. h.Fingerprint is not written: its place differs by object (see
// AppendFingerprint).
func AppendHead(dst []byte, object string, h Header) []byte {
	dst = append(dst, `{"id":`...)
	dst = jsonstring.Append(dst, h.ID)
	dst = append(dst, `,"object":"`...)
	dst = append(dst, object...)
	dst = append(dst, `","created":`...)
	dst = strconv.AppendInt(dst, h.Created, 10)
	dst = append(dst, `,"model":`...)
	return jsonstring.Append(dst, h.Model)
}

// AppendFingerprint appends `,"system_fingerprint":..` when fingerprint is
// set.
func AppendFingerprint(dst []byte, fingerprint string) []byte {
	if fingerprint == "" {
		return dst
	}
	dst = append(dst, `,"system_fingerprint":`...)
	return jsonstring.Append(dst, fingerprint)
}

// AppendServiceTier appends `,"service_tier":..` when tier is set.
func AppendServiceTier(dst []byte, tier string) []byte {
	if tier == "" {
		return dst
	}
	dst = append(dst, `,"service_tier":`...)
	return jsonstring.Append(dst, tier)
}

// AppendChoiceEnd ends the one choice of a chunk after its delta:
// `,"logprobs":null,"finish_reason":..}]` (finish "" is null), then
// `,"usage":null` when the client asked for usage, so that every chunk
// but the last carries the key. The chunk object stays open.
func AppendChoiceEnd(dst []byte, finish string, usageNull bool) []byte {
	return appendChoiceEnd(dst, nil, finish, usageNull)
}

// appendChoiceEnd is AppendChoiceEnd with the choice's logprobs object
// (JSON; nil is null).
func appendChoiceEnd(dst, logprobs []byte, finish string, usageNull bool) []byte {
	dst = append(dst, `,"logprobs":`...)
	if len(logprobs) == 0 {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, logprobs...)
	}
	dst = append(dst, `,"finish_reason":`...)
	if finish == "" {
		dst = append(dst, "null"...)
	} else {
		dst = jsonstring.Append(dst, finish)
	}
	dst = append(dst, "}]"...)
	if usageNull {
		dst = append(dst, `,"usage":null`...)
	}
	return dst
}
