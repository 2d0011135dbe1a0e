package wire

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestInteger(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]bool{
		"50": true, "-3": true, "0": true, "50.0": true, "50.000": true,
		"50.5": false, "50.000000000000000000001": false, "0.9999999999999999999999": false,
		"1e2": true, "1E400": true, "1.5e1": true, "100e-2": true, "-2.50e1": true,
		"1.55e1": false, "5e-1": false, "12e-1": false, "5.": false, "1e": false, "1e+": false,
		`"5"`: false, "null": false, "true": false,
		// An exponent past every digit the literal has: its sign decides
		// (a review found a fixed clamp let a long literal through).
		"1" + strings.Repeat("0", 70) + "e-100": false, "1" + strings.Repeat("0", 70) + "e-60": true,
		"1" + strings.Repeat("0", 1<<20+100) + "e-2000000": false,
	} {
		if got := Integer(gjson.Parse(raw)); got != want {
			t.Errorf("Integer(%s) = %v, want %v", raw, got, want)
		}
	}
}

// FuzzInteger: Integer never panics, and what it takes for an integer (of
// a size float64 holds exactly) is one to float64 too.
func FuzzInteger(f *testing.F) {
	for _, s := range []string{"50", "-0.00", "1e2", "7.5", "-", "--1", "0x10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v := gjson.Parse(s)
		if Integer(v) && v.Num < 1<<52 && v.Num > -(1<<52) && v.Num != float64(int64(v.Num)) {
			t.Fatalf("%q taken for an integer, float %v", s, v.Num)
		}
	})
}
