package limits

import (
	"math"
	"strings"

	"github.com/llmgw/gateway/config"
)

// DefaultPrices are list prices in dollars per million tokens, by upstream
// model name (the longest matching prefix wins), for models whose
// [[models]] entry sets no price. Anything else is free: set price on the
// model to count its spend.
var DefaultPrices = map[string]config.Price{
	"gpt-4o":       {Input: 2.5, Output: 10, CachedInput: 1.25},
	"gpt-4o-mini":  {Input: 0.15, Output: 0.6, CachedInput: 0.075},
	"gpt-4.1":      {Input: 2, Output: 8, CachedInput: 0.5},
	"gpt-4.1-mini": {Input: 0.4, Output: 1.6, CachedInput: 0.1},
	"gpt-4.1-nano": {Input: 0.1, Output: 0.4, CachedInput: 0.025},
	"o3":           {Input: 2, Output: 8, CachedInput: 0.5},
	"o4-mini":      {Input: 1.1, Output: 4.4, CachedInput: 0.275},
}

// priceFor returns the price of a model: its own, else the default of its
// upstream name's longest listed prefix, else zero.
func priceFor(own *config.Price, upstream string) config.Price {
	if own != nil {
		return *own
	}
	best, found := "", config.Price{}
	for name, p := range DefaultPrices {
		if strings.HasPrefix(upstream, name) && len(name) > len(best) {
			best, found = name, p
		}
	}
	return found
}

// tokens is the usage of one upstream call.
type tokens struct {
	input, output, cached int64
}

// cost returns the price of t in micro-dollars. A price in dollars per
// million tokens is exactly micro-dollars per token.
func cost(p config.Price, t tokens) int64 {
	cached := min(t.cached, t.input)
	c := float64(t.input-cached)*p.Input + float64(cached)*p.CachedInput + float64(t.output)*p.Output
	return int64(math.Round(c))
}
