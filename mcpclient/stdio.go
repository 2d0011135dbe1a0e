package mcpclient

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
)

// stdioTransport runs a stdio server as the SDK's CommandTransport does
// (newline-delimited JSON on its stdin and stdout; closed by closing its
// stdin, then SIGTERM, then SIGKILL), with one difference: lines of its
// stdout that are not a JSON-RPC message are passed over (jsonLines), as
// the official TypeScript and Python clients pass over them. A server that
// prints a banner, its progress or its logs to stdout (many do, against the
// spec) would otherwise never connect, or break its connection, and every
// call in flight on it, at its first such line.
type stdioTransport struct {
	cmd       *exec.Cmd
	terminate time.Duration // how long Close waits after each step
}

func (t *stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := t.cmd.Start(); err != nil {
		return nil, err
	}
	// The connection is closed by closing stdin (childStdin), not stdout.
	tr := &mcp.IOTransport{Reader: io.NopCloser(newJSONLines(stdout, mcp.DefaultMaxLineLength)), Writer: &childStdin{WriteCloser: stdin, cmd: t.cmd, terminate: t.terminate}}
	return tr.Connect(ctx)
}

// childStdin is a stdio server's stdin. Close ends the server as the MCP
// spec asks of a client: stdin closed, then, if it has not exited within
// terminate, SIGTERM, then SIGKILL.
type childStdin struct {
	io.WriteCloser
	cmd       *exec.Cmd
	terminate time.Duration
}

func (c *childStdin) Close() error {
	if err := c.WriteCloser.Close(); err != nil {
		return fmt.Errorf("closing stdin: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.cmd.Wait() }()
	wait := func() (error, bool) {
		t := time.NewTimer(c.terminate)
		defer t.Stop()
		select {
		case err := <-exited:
			return err, true
		case <-t.C:
			return nil, false
		}
	}
	if err, ok := wait(); ok {
		return err
	}
	if c.cmd.Process.Signal(syscall.SIGTERM) == nil {
		if err, ok := wait(); ok {
			return err
		}
	}
	if err := c.cmd.Process.Kill(); err != nil {
		return err
	}
	if err, ok := wait(); ok {
		return err
	}
	return errors.New("the stdio server did not exit")
}

// jsonLines passes on the lines of a stdio server's stdout that are
// JSON-RPC messages (an object with "jsonrpc": "2.0", or a batch of them),
// one per line as the MCP spec has them, and takes out every other line: a
// banner, "[dotenv] injecting env", progress, or a JSON log line
// ({"level":"info",...}), each of which would fail the SDK's connection.
// The official TypeScript and Python clients read stdout line by line in
// the same way. A message is passed on trimmed of blanks (and of a byte
// order mark). A line over max, the SDK's bound on one message, that may be
// a message (mayBeMessage) goes on as it comes, for the SDK to
// refuse as too large; any other is taken out as it comes. So jsonLines
// holds about max bytes of a line at most (and its reader's buffer).
type jsonLines struct {
	r    *bufio.Reader
	max  int
	line []byte // the line read so far
	out  []byte // passed on, not yet read
	long bool   // passing on the rest of a line over max
	skip bool   // taking out the rest of a line over max
	err  error  // the stream's end, once out is read
}

// lineBuffer is jsonLines' read buffer; a line gathered in more than
// keptLine bytes is not kept for the next.
const (
	lineBuffer = 64 << 10
	keptLine   = 64 << 10
)

func newJSONLines(r io.Reader, max int) *jsonLines {
	return &jsonLines{r: bufio.NewReaderSize(r, lineBuffer), max: max}
}

func (j *jsonLines) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for len(j.out) == 0 {
		if j.err != nil {
			return 0, j.err
		}
		if len(j.line) == 0 && cap(j.line) > keptLine {
			j.line = nil // out is read: nothing uses the array
		}
		frag, err := j.r.ReadSlice('\n')
		full := err == bufio.ErrBufferFull
		if err != nil && !full {
			j.err = err
		}
		switch {
		case j.long:
			j.out, j.long = frag, full // read before the next ReadSlice
			continue
		case j.skip:
			j.skip = full
			continue
		}
		j.line = append(j.line, frag...)
		switch {
		case full && len(j.line) > j.max:
			if mayBeMessage(j.line) {
				j.out, j.long = j.line, true
			} else {
				j.skip = true
			}
			j.line = j.line[:0]
		case full:
		default: // a whole line, or the stream's last bytes
			if m := message(j.line); m != nil {
				j.out = append(m, '\n') // within line's array: m ends before it does, or at its end
			}
			j.line = j.line[:0]
		}
	}
	n := copy(p, j.out)
	if j.out = j.out[n:]; len(j.out) == 0 {
		j.out = nil // keeps no array alive
	}
	return n, nil
}

// mayBeMessage reports whether a line begins as a message or a batch of
// them would: '{', or '[' and then '{', after blanks (and a byte order
// mark).
func mayBeMessage(line []byte) bool {
	c := bytes.TrimLeft(bytes.TrimPrefix(bytes.TrimLeft(line, " \t\r"), bom), " \t\r")
	if len(c) > 0 && c[0] == '[' {
		c = bytes.TrimLeft(c[1:], " \t\r")
	}
	return len(c) > 0 && c[0] == '{'
}

// bom is UTF-8's byte order mark, which some Windows tools write first.
var bom = []byte("\xef\xbb\xbf")

// message returns line trimmed when it is a JSON-RPC message or a batch of
// them, else nil.
func message(line []byte) []byte {
	m := bytes.TrimSpace(bytes.TrimPrefix(bytes.TrimSpace(line), bom))
	if len(m) == 0 || !jsonvalid.Bytes(m) {
		return nil
	}
	var v gjson.Result
	switch m[0] {
	case '{':
		v = gjson.GetBytes(m, "jsonrpc")
	case '[':
		v = gjson.GetBytes(m, "0.jsonrpc") // a batch: its first message tells
	}
	if v.Type != gjson.String || v.Str != "2.0" {
		return nil
	}
	return m
}
