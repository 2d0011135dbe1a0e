package mcpclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stdioTransport runs a stdio server as the SDK's CommandTransport does
// (newline-delimited JSON on its stdin and stdout; closed by closing its
// stdin, then SIGTERM, then SIGKILL), with one difference: lines of its
// stdout that are not a JSON-RPC message are passed over (jsonLines), as
// the official TypeScript and Python clients pass over them. A server that
// prints a banner or its progress to stdout (many do, against the spec)
// would otherwise never connect, or break its connection, and every call
// in flight on it, at its first such line.
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
	tr := &mcp.IOTransport{Reader: io.NopCloser(&jsonLines{r: stdout}), Writer: &childStdin{WriteCloser: stdin, cmd: t.cmd, terminate: t.terminate}}
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

// jsonLines passes on what a stdio server writes to its stdout, less the
// lines that cannot begin a JSON-RPC message: between messages, a line
// whose first byte other than blanks is not '{', nor a '[' whose next such
// byte is '{' (a batch), is taken out up to its newline ("[dotenv] injecting
// env", "Server running on stdio"). Inside a message nothing is taken out
// (a message written over several lines reaches the SDK whole), and a line
// that begins like a message goes on as it is: one that is not JSON after
// all fails the connection as before. It holds back at most a batch's '['
// until the byte after it, so it adds no buffer to the SDK's bound on one
// message.
type jsonLines struct {
	r     io.Reader
	depth int  // open objects and arrays of the message being passed on
	str   bool // inside a string of that message
	esc   bool // after a backslash in that string
	mid   bool // between messages, but past the start of the line
	skip  bool // taking out a line, up to its newline
	held  bool // a line began with '[': held back until what follows tells
}

func (j *jsonLines) Read(p []byte) (int, error) {
	for {
		// Room in front for a held '[' and the byte that releases it.
		off := 0
		switch {
		case j.held && len(p) > 1:
			off = 1
		case j.held && len(p) == 1:
			// No room to tell (the SDK's bound on one message is all but
			// reached): the '[' goes on as a batch's.
			p[0], j.held, j.depth = '[', false, 1
			return 1, nil
		}
		n, err := j.r.Read(p[off:])
		n = j.filter(p, off, off+n)
		if n > 0 || err != nil {
			return n, err
		}
	}
}

// filter takes the lines to pass over out of b[from:to], moving what is left
// to the start of b, and returns its length. b[:from] is free room (from is 1
// when a '[' is held, else 0).
func (j *jsonLines) filter(b []byte, from, to int) int {
	k := 0
	for _, c := range b[from:to] {
		switch {
		case j.skip:
			j.skip = c != '\n'
			continue
		case j.held:
			switch c {
			case ' ', '\t', '\r':
				continue // insignificant between '[' and what follows
			case '{':
				b[k] = '['
				k++
				j.held, j.depth = false, 1 // and c opens the batch's first message, below
			default:
				j.held, j.skip = false, c != '\n'
				if c != '\n' {
					continue
				}
			}
		}
		switch {
		case j.skip:
			continue
		case j.str:
			switch {
			case j.esc:
				j.esc = false
			case c == '\\':
				j.esc = true
			case c == '"':
				j.str = false
			}
		case j.depth > 0:
			switch c {
			case '"':
				j.str = true
			case '{', '[':
				j.depth++
			case '}', ']':
				j.depth--
			}
		case c == '{':
			j.depth, j.mid = 1, true
		case c == '\n':
			j.mid = false
		case j.mid || c == ' ' || c == '\t' || c == '\r':
			// The rest of a line a message began on, or blanks.
		case c == '[':
			j.held, j.mid = true, true
			continue
		default:
			j.skip = true
			continue
		}
		b[k] = c
		k++
	}
	return k
}
