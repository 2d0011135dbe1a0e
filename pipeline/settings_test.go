package pipeline

import (
	"testing"

	"github.com/tidwall/gjson"
)

// A bound out of range is written in plain digits, as OpenAI writes it.
func TestCheckNumberMessage(t *testing.T) {
	t.Parallel()
	err := CheckNumber(gjson.Parse("0"), "max_output_tokens", 1, 2147483647, true)
	if err == nil || err.(*Error).Message != "Invalid 'max_output_tokens': expected a value from 1 to 2147483647." {
		t.Fatalf("%v", err)
	}
	if err := CheckNumber(gjson.Parse("3"), "temperature", 0, 2, false); err == nil || err.(*Error).Message != "Invalid 'temperature': expected a value from 0 to 2." {
		t.Fatalf("%v", err)
	}
}
