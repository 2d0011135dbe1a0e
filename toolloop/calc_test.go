package toolloop

import (
	"context"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/pipeline"
	"github.com/tidwall/gjson"
)

func TestCalculate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, expr string
		want       float64
		err        string
	}{
		{"precedence", "1 + 2 * 3", 7, ""},
		{"parentheses", "(1 + 2) * 3", 9, ""},
		{"decimals", "0.1 + 0.2", 0.30000000000000004, ""},
		{"leading dot", ".5 * 4", 2, ""},
		{"unary minus", "-3 - -2", -1, ""},
		{"unary plus", "+4", 4, ""},
		{"power right-assoc", "2^3^2", 512, ""},
		{"minus binds looser than power", "-2^2", -4, ""},
		{"negative exponent", "2^-1", 0.5, ""},
		{"division", "7 / 2", 3.5, ""},
		{"nested", "((2))*((3+1))", 8, ""},
		{"division by zero", "1/0", 0, "division by zero"},
		{"zero over zero", "0/(1-1)", 0, "division by zero"},
		{"overflow", "10^400", 0, "finite"},
		{"empty", "", 0, "end of expression"},
		{"trailing operator", "1+", 0, "end of expression"},
		{"letters", "2*x", 0, "unexpected 'x'"},
		{"unbalanced", "(1+2", 0, "missing ')'"},
		{"extra paren", "1+2)", 0, "unexpected ')'"},
		{"two dots", "1.2.3", 0, "bad number"},
		{"too deep", strings.Repeat("(", 100) + "1" + strings.Repeat(")", 100), 0, "nested deeper"},
		{"too long", strings.Repeat("1+", 3000) + "1", 0, "longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Calculate(tc.expr)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Calculate(%q) = %v, %v; want error %q", tc.expr, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Calculate(%q) = %v, %v; want %v", tc.expr, got, err, tc.want)
			}
		})
	}
}

// FuzzCalculate: the calculator parses model-produced text. Besides never
// panicking: a result is finite; an error that names a position names one
// inside the input (or just past its end); and a value is stable under
// rewrites that must not change it: surrounding whitespace, parentheses,
// "0+(...)", and negation "-(...)" negates it. A rewrite may only fail for
// the length or nesting bound.
func FuzzCalculate(f *testing.F) {
	for _, s := range []string{"1+2*3", "-(2^-3)/.5", "((((1))))", "1/0", "2^3^4^5", "--1", "1e5", "(", ")",
		"9999999999999999999999^99", "0.1+0.2", "2^-1074", "-2^2", "1-0*(1/0)", "3 \t* \n4", "1)+(2"} {
		f.Add(s)
	}
	pos := regexp.MustCompile(`at position (\d+)`)
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Calculate(s)
		if err != nil {
			if m := pos.FindStringSubmatch(err.Error()); m != nil {
				if n, _ := strconv.Atoi(m[1]); n < 1 || n > len(s)+1 {
					t.Fatalf("Calculate(%q): %v: position outside the input", s, err)
				}
			}
			return
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			t.Fatalf("Calculate(%q) = %v without error", s, v)
		}
		for _, rw := range []struct {
			expr string
			want float64
		}{
			{" " + s + "\t", v},
			{"(" + s + ")", v},
			{"0+(" + s + ")", v},
			{"-(" + s + ")", -v},
		} {
			got, err := Calculate(rw.expr)
			if err != nil {
				if !strings.Contains(err.Error(), "nested deeper") && !strings.Contains(err.Error(), "longer than") {
					t.Fatalf("Calculate(%q) = %v, but Calculate(%q) fails: %v", s, v, rw.expr, err)
				}
				continue
			}
			if got != rw.want {
				t.Fatalf("Calculate(%q) = %v, but Calculate(%q) = %v, want %v", s, v, rw.expr, got, rw.want)
			}
		}
	})
}

func TestCurrentTime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, args, zone string
		wantErr          bool
	}{
		{"default UTC", `{}`, "UTC", false},
		{"named zone", `{"timezone":"Asia/Tokyo"}`, "Asia/Tokyo", false},
		{"unknown zone", `{"timezone":"Mars/Olympus"}`, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := currentTime(context.Background(), &pipeline.ToolCall{Arguments: []byte(tc.args)})
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "Mars/Olympus") {
					t.Fatalf("want an error naming the zone, got %s %v", out, err)
				}
				return
			}
			r := gjson.ParseBytes(out)
			ts, perr := time.Parse(time.RFC3339, r.Get("time").String())
			loc, _ := time.LoadLocation(tc.zone)
			_, wantOff := time.Now().In(loc).Zone()
			_, gotOff := ts.Zone()
			if err != nil || perr != nil || r.Get("timezone").String() != tc.zone || gotOff != wantOff ||
				time.Since(ts) > time.Minute || time.Since(ts) < -time.Minute {
				t.Fatalf("result %s err %v", out, err)
			}
		})
	}
}
