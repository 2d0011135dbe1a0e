package pipeline

import (
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/wire"
)

// CheckNumber refuses the request setting v, named key, unless it is
// absent, null (the setting's default) or a number (a whole one when
// integer) from min to max, with the 400 OpenAI answers.
func CheckNumber(v gjson.Result, key string, min, max float64, integer bool) error {
	switch {
	case !v.Exists() || v.Type == gjson.Null:
		return nil
	case v.Type != gjson.Number || (integer && !wire.Integer(v)):
		kind := "a number"
		if integer {
			kind = "an integer"
		}
		return BadRequest(key, "Invalid '%s': expected %s.", key, kind)
	case v.Num < min || v.Num > max:
		return BadRequest(key, "Invalid '%s': expected a value from %s to %s.", key, plain(min), plain(max))
	}
	return nil
}

// plain writes a bound as a person would: 2147483647, not 2.147483647e+09.
func plain(f float64) string {
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// CheckBool refuses the request setting v, named key, unless it is absent,
// null or a boolean, with the 400 OpenAI answers.
func CheckBool(v gjson.Result, key string) error {
	if v.Exists() && v.Type != gjson.Null && !v.IsBool() {
		return BadRequest(key, "Invalid '%s': expected a boolean.", key)
	}
	return nil
}

// OffersFunctions reports whether functions, a chat request's legacy
// functions member, offers anything: absent, null and an empty list do not.
// The tool loop and the prompted tool layer decide by it alike, so that a
// request the loop runs no session for is one the prompted layer refuses.
func OffersFunctions(functions gjson.Result) bool {
	return functions.Type != gjson.Null && !(functions.IsArray() && len(functions.Array()) == 0) // absent is Null too
}
