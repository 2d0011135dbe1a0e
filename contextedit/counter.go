package contextedit

import (
	"errors"
	"fmt"
	"hash/maphash"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
	"unsafe"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
)

// The OpenAI cookbook's accounting for chat models ("How to count tokens with
// tiktoken"): every message costs 3 tokens of framing, a name 1 more, and the
// reply is primed with 3. Tool calls and image parts are not in the cookbook;
// their costs are estimates (see messageCost).
const (
	tokensPerMessage  = 3
	tokensPerName     = 1
	tokensPriming     = 3
	tokensPerToolCall = 3
	// tokensPerImage is the cost of a low-detail image (gpt-4o family). The
	// real cost depends on the image size, which the gateway does not fetch.
	tokensPerImage = 85
)

// cacheEntries bounds each Counter's cache of string token counts. A 100k-token
// transcript holds a few thousand strings; the cache spans concurrent requests.
const cacheEntries = 1 << 15

// smallLen bounds the strings looked up in Counter.small.
const smallLen = 9

// ErrInvalidBody reports a body that is not a JSON object with a messages array.
var ErrInvalidBody = errors.New("contextedit: body is not a chat request with a messages array")

func init() {
	// The loader embeds the .tiktoken files: no network, no cache directory.
	// Set once here, before any goroutine can build an encoder.
	tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader())
}

// Counter counts the tokens of chat requests and strings for one tiktoken
// encoding. Counts of strings are cached (keyed by a hash of the string), so
// counting the transcript of a tool loop again after a few messages were
// appended only tokenizes the new strings. A Counter is safe for concurrent
// use; get one with CounterFor.
type Counter struct {
	name    string
	enc     *tiktoken.Tiktoken
	seedRaw maphash.Seed // keys of raw JSON strings (quotes and escapes included)
	seedTxt maphash.Seed // keys of decoded text, a separate key space
	cache   *lru.Cache[uint64, int32]
	small   map[string]int // roles and other frequent short strings
}

type counterSlot struct {
	once    sync.Once
	c       *Counter
	err     error
	built   atomic.Bool // c is set (CounterBuilt)
	started atomic.Bool // a background build was asked for (BuildCounter)
}

var counters sync.Map // encoding name → *counterSlot

// CounterFor returns the shared Counter of an encoding ("" = config.DefaultEncoding,
// for a request without a route;
// o200k_base, cl100k_base, p50k_base, r50k_base). Building an encoder takes
// about half a second and 30 MB of temporaries, and it keeps about 10 MB
// (o200k_base, without its unreadTables), so it happens once per encoding per
// process, on first use: the first request that needs a count pays the build,
// and a process that never counts never holds the tables (which every garbage
// collection would mark). Config validation refuses an unknown name at start.
// Safe for concurrent use.
func CounterFor(encoding string) (*Counter, error) {
	if encoding == "" {
		encoding = config.DefaultEncoding
	}
	v, ok := counters.Load(encoding) // once built, a lookup: no slot, no closure per call
	if !ok {
		v, _ = counters.LoadOrStore(encoding, &counterSlot{})
	}
	slot := v.(*counterSlot)
	slot.once.Do(func() {
		slot.c, slot.err = newCounter(encoding, cacheEntries)
		slot.built.Store(slot.c != nil)
		// The build's temporaries (the vocabulary file read, split and
		// decoded: about 30 MB for o200k_base) are garbage now, but the
		// pages they took would stay resident until the runtime's
		// scavenger got to them: give them back now, once per encoding.
		debug.FreeOSMemory()
	})
	return slot.c, slot.err
}

func newCounter(encoding string, entries int) (c *Counter, err error) {
	defer func() {
		// tiktoken-go panics on some malformed inputs while building; a bad
		// encoding name must be an error, never a crash.
		if r := recover(); r != nil {
			c, err = nil, fmt.Errorf("contextedit: encoding %q: %v", encoding, r)
		}
	}()
	enc, err := tiktoken.GetEncoding(encoding)
	if err != nil {
		return nil, fmt.Errorf("contextedit: encoding %q: %w", encoding, err)
	}
	dropUnread(enc)
	c = &Counter{name: encoding, enc: enc, seedRaw: maphash.MakeSeed(), seedTxt: maphash.MakeSeed()}
	if entries > 0 {
		c.cache, _ = lru.New[uint64, int32](entries)
	}
	c.small = map[string]int{}
	for _, s := range []string{"system", "developer", "user", "assistant", "tool", "function", "{}", ""} {
		c.small[s] = len(enc.EncodeOrdinary(s))
	}
	return c, nil
}

// unreadTables are the fields of tiktoken-go's CoreBPE that a Counter never
// reads: the decoder (token → bytes, for Decode) and a sorted copy of the
// vocabulary (for an encoding of unstable text). Counting
// (EncodeOrdinary) reads the encoder map and the split pattern only. For
// o200k_base they are 13.8 of the 23.6 MB an encoder holds, which every
// collection marks and which the heap's growth doubles in resident memory.
var unreadTables = []string{"decoder", "sortedTokenBytes"}

// dropUnread lets go of enc's unreadTables. tiktoken-go offers no encoder
// without them, so they are found by name and kind through reflection and
// set to nil; a version that lays its types out otherwise leaves them as
// they are (and TestCounterDropsUnreadTables fails). A Counter never calls
// Decode, which would return nothing once the decoder is gone.
func dropUnread(enc *tiktoken.Tiktoken) {
	core, ok := coreOf(enc)
	if !ok {
		return
	}
	for _, name := range unreadTables {
		f := core.FieldByName(name)
		if f.IsValid() && (f.Kind() == reflect.Map || f.Kind() == reflect.Slice) {
			reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().SetZero()
		}
	}
}

// coreOf returns the CoreBPE struct enc's field bpe points to.
func coreOf(enc *tiktoken.Tiktoken) (reflect.Value, bool) {
	bpe := reflect.ValueOf(enc).Elem().FieldByName("bpe")
	if !bpe.IsValid() || bpe.Kind() != reflect.Pointer || bpe.IsNil() || bpe.Elem().Kind() != reflect.Struct {
		return reflect.Value{}, false
	}
	return bpe.Elem(), true
}

// Encoding returns the name of the Counter's encoding.
func (c *Counter) Encoding() string { return c.name }

// CountText returns the number of tokens of s. Special tokens such as
// <|endoftext|> are counted as ordinary text, as the API treats user text.
func (c *Counter) CountText(s string) int {
	if len(s) <= smallLen {
		if n, ok := c.small[s]; ok {
			return n
		}
	}
	if c.cache == nil {
		return c.encodeLen(s)
	}
	key := maphash.String(c.seedTxt, s)
	if n, ok := c.cache.Get(key); ok {
		return int(n)
	}
	n := c.encodeLen(s)
	c.cache.Add(key, int32(n))
	return n
}

// countString counts a gjson string value, keyed by its raw JSON so that a
// cache hit neither unescapes nor allocates. Non-strings count 0.
func (c *Counter) countString(v gjson.Result) int {
	if v.Type != gjson.String {
		return 0
	}
	if len(v.Str) <= smallLen {
		if n, ok := c.small[v.Str]; ok {
			return n
		}
	}
	if c.cache == nil {
		return c.encodeLen(v.Str)
	}
	key := maphash.String(c.seedRaw, v.Raw)
	if n, ok := c.cache.Get(key); ok {
		return int(n)
	}
	n := c.encodeLen(v.Str)
	c.cache.Add(key, int32(n))
	return n
}

// Count returns the prompt tokens of an OpenAI chat request: the cookbook's
// count of messages, plus the tokens of the tools' JSON, plus the priming.
// body is only read and not retained. It returns ErrInvalidBody when body is
// not an object with a messages array.
// It is an unedited transcript's count (transcript.count), summed as the
// messages are read, without building the transcript.
func (c *Counter) Count(body []byte) (int, error) {
	// A read-only view: nothing parsed from it outlives the call (the cache
	// keeps hashes), so the body is not copied.
	msgs, tools, err := promptParts(gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body))))
	if err != nil {
		return 0, err
	}
	n := tokensPriming + c.toolsCost(tools)
	msgs.ForEach(func(_, m gjson.Result) bool {
		n += c.messageCost(m)
		return true
	})
	return n, nil
}

// toolsCost counts the tools' JSON as text: the providers render the tool
// definitions into the prompt in a form of about that size.
func (c *Counter) toolsCost(tools gjson.Result) int {
	if !tools.IsArray() || len(tools.Raw) <= 2 {
		return 0
	}
	if c.cache == nil {
		return c.encodeLen(tools.Raw)
	}
	return c.CountText(tools.Raw)
}

// messageCost follows the cookbook: 3 tokens, then every string field (role,
// content, name, tool_call_id, ...) as text, and 1 more for a name. Content
// parts count their text (images a fixed estimate); each tool call counts its
// name and arguments plus 3.
func (c *Counter) messageCost(m gjson.Result) int {
	n := tokensPerMessage
	m.ForEach(func(k, v gjson.Result) bool {
		switch v.Type {
		case gjson.String:
			n += c.countString(v)
			if k.Str == "name" {
				n += tokensPerName
			}
		case gjson.JSON:
			switch k.Str {
			case "content":
				n += c.contentCost(v)
			case "tool_calls":
				v.ForEach(func(_, call gjson.Result) bool {
					n += tokensPerToolCall + c.callCost(call)
					return true
				})
			case "function_call":
				n += c.countString(v.Get("name")) + c.countString(v.Get("arguments"))
			}
		}
		return true
	})
	return n
}

// contentCost counts a content value: a string, or an array of parts.
func (c *Counter) contentCost(v gjson.Result) int {
	if v.Type == gjson.String {
		return c.countString(v)
	}
	if !v.IsArray() {
		return 0
	}
	n := 0
	v.ForEach(func(_, part gjson.Result) bool {
		switch part.Get("type").Str {
		case "text":
			n += c.countString(part.Get("text"))
		case "refusal":
			n += c.countString(part.Get("refusal"))
		case "image_url":
			n += tokensPerImage
		}
		return true
	})
	return n
}

// callCost counts one tool call's name and input without the framing.
func (c *Counter) callCost(call gjson.Result) int {
	if f := call.Get("function"); f.IsObject() {
		return c.countString(f.Get("name")) + c.countString(f.Get("arguments"))
	}
	if cu := call.Get("custom"); cu.IsObject() {
		return c.countString(cu.Get("name")) + c.countString(cu.Get("input"))
	}
	return 0
}

// CounterBuilt reports whether the Counter of an encoding ("" =
// config.DefaultEncoding) has been built in this process (its tables are
// held).
func CounterBuilt(encoding string) bool {
	if encoding == "" {
		encoding = config.DefaultEncoding
	}
	v, ok := counters.Load(encoding)
	return ok && v.(*counterSlot).built.Load()
}

// BuildCounter starts building the Counter of an encoding on a goroutine
// of its own, once, for a caller that must not wait for the build (see
// CounterFor) and makes do without a count until it is done.
func BuildCounter(encoding string) {
	if encoding == "" {
		encoding = config.DefaultEncoding
	}
	v, _ := counters.LoadOrStore(encoding, &counterSlot{})
	if v.(*counterSlot).started.CompareAndSwap(false, true) {
		go func() { _, _ = CounterFor(encoding) }()
	}
}

// CountJSON estimates the input tokens of any JSON request body, for an
// endpoint whose form the Counter does not know (embeddings, completions,
// the Responses API, images). Every key and every string value counts as
// text, every number as one token (embeddings take token ids), except
// media, which no model reads as text: a string under an image key
// (image_url, url, image, images, mask) that is a URL, a data URL or
// base64 counts as one image (tokensPerImage, as Count counts an image
// part); one under a file key (file_data, file, data) that is a data URL
// or base64 counts at bytesPerToken, untokenized. Anywhere else a data URL
// is text, as a provider reads it there. The work is bounded whatever the
// body: text past maxCountedText, and values nested deeper than
// maxCountDepth, are estimated from their bytes (estimateBytes) instead of
// tokenized. A body that is not JSON is estimated from its bytes.
func (c *Counter) CountJSON(body []byte) int {
	v := gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body)))
	if !v.IsObject() && !v.IsArray() {
		return estimateBytes(unsafe.String(unsafe.SliceData(body), len(body)))
	}
	budget := maxCountedText
	return c.countValue("", v, 0, &budget)
}

const (
	// maxCountedText bounds the bytes of text CountJSON tokenizes per body
	// (tokenizing costs about 0.2 s per MiB of prose, 0.5 s of base64).
	maxCountedText = 64 << 10
	// maxCountDepth bounds how deep CountJSON follows the nesting.
	maxCountDepth = 32
	// bytesPerToken is the estimate of a file's base64 characters.
	bytesPerToken = 4
)

// countValue counts v, the value of key (an array's elements take the
// array's key).
func (c *Counter) countValue(key string, v gjson.Result, depth int, budget *int) int {
	switch v.Type {
	case gjson.Number:
		return 1
	case gjson.String:
		switch mediaKind(key, v.Str) {
		case mediaImage:
			return tokensPerImage
		case mediaFile:
			return (len(v.Str) + bytesPerToken - 1) / bytesPerToken
		}
		return c.countText(v, budget)
	case gjson.JSON:
		if depth >= maxCountDepth {
			return estimateBytes(v.Raw)
		}
		n := 0
		array := v.IsArray()
		v.ForEach(func(k, e gjson.Result) bool {
			if array {
				n += c.countValue(key, e, depth+1, budget)
			} else {
				n += c.countText(k, budget) + c.countValue(k.Str, e, depth+1, budget)
			}
			return true
		})
		return n
	}
	return 0
}

// EstimateJSON is CountJSON without a tokenizer, for a caller that must
// not wait for a Counter's build (CounterFor): every text is estimated from
// its bytes (estimateBytes), and media count as CountJSON counts them.
func EstimateJSON(body []byte) int {
	var c *Counter // countText estimates what a nil Counter would tokenize
	return c.CountJSON(body)
}

// countText tokenizes a string value while the budget lasts, and
// estimates it from its bytes after (always, for a nil Counter).
func (c *Counter) countText(v gjson.Result, budget *int) int {
	if c == nil || len(v.Str) > *budget {
		*budget = 0
		return estimateBytes(v.Str)
	}
	*budget -= len(v.Str)
	return c.countString(v)
}

// estimateBytes estimates the tokens of text it does not tokenize: four
// ASCII bytes a token (English prose), two bytes of any other a token
// (about a CJK character's three bytes for one and a half, an emoji's
// four for two).
func estimateBytes(s string) int {
	ascii := 0
	for i := 0; i < len(s); i++ {
		if s[i] < utf8.RuneSelf {
			ascii++
		}
	}
	return (ascii+3)/4 + (len(s)-ascii+1)/2
}

type media int

const (
	mediaNone media = iota
	mediaImage
	mediaFile
)

// mediaKind tells whether s, the value of key, is media: an image or a
// file the provider decodes rather than reads as text.
func mediaKind(key, s string) media {
	switch key {
	case "image_url", "url", "image", "images", "mask":
		if strings.HasPrefix(s, "https://") || strings.HasPrefix(s, "http://") || isDataURL(s) || isBase64(s) {
			return mediaImage
		}
	case "file_data", "file", "data":
		if isDataURL(s) || isBase64(s) {
			return mediaFile
		}
	}
	return mediaNone
}

// isDataURL reports whether s is a data URL with a base64 payload
// ("data:<type>;base64,<base64>").
func isDataURL(s string) bool {
	rest, ok := strings.CutPrefix(s, "data:")
	if !ok {
		return false
	}
	i := strings.Index(rest, ";base64,")
	if i < 0 || strings.ContainsAny(rest[:i], " ,\"") {
		return false
	}
	return isBase64(rest[i+len(";base64,"):])
}

// isBase64 reports whether s is base64 in either alphabet, padding only at
// its end.
func isBase64(s string) bool {
	s = strings.TrimRight(s, "=")
	if len(s) == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
