package mcpclient

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/config"
)

// manyToolsServerEnv makes the test binary a stdio MCP server whose
// tools/list names one tool more than maxServerTools.
const manyToolsServerEnv = "LLMGW_TEST_MANY_TOOLS_MCP_SERVER"

// With the value "skipped", the one more has a name no OpenAI function
// may have, so it is skipped, and the server lists exactly the bound's
// worth of tools the gateway takes.
func manyToolsServer() {
	tools := make([]string, maxServerTools+1)
	for i := range tools {
		tools[i] = fmt.Sprintf("t%d", i)
	}
	switch os.Getenv(manyToolsServerEnv) {
	case "skipped":
		tools[maxServerTools] = "bad name"
	case "repeated":
		tools[maxServerTools] = "t7" // listed twice
	}
	stdioServer("many", tools, nil, nil)
}

// TestToolListBounded: a server that lists more than maxServerTools tools
// (here one more) is not taken up: its listing fails, the server shows as
// down with the reason, and none of its tools is offered, instead of every
// request's body carrying every one of them (and the gateway
// holding whatever a server cares to list, page after page).
func TestToolListBounded(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m := Start(Options{
		Servers: defaulted(config.MCPServer{Name: "many", Command: exe, Env: map[string]string{manyToolsServerEnv: "1"}}),
		Logger:  testLogger(t),
		// The first attempt lists 1,025 tools from a race-built binary;
		// on a loaded machine that outlasts the default wait, and the
		// status would still be the attempt's, not its failure.
		StartWait: time.Minute,
	})
	defer m.Close()
	if n := len(m.Tools()); n != 0 {
		t.Fatalf("%d tools taken up from a server that lists %d; want none over the bound of %d", n, maxServerTools+1, maxServerTools)
	}
	if st := m.Status()["mcp:many"]; !strings.Contains(st, "listing tools failed") {
		t.Fatalf("status %q; want the listing's failure", st)
	}
}

// TestToolListBoundCountsToolsTakenUp: a tool skipped for its name does
// not count against the bound: a server with exactly maxServerTools usable
// tools and one unusable is taken up whole. A name the server lists twice is taken up once (the first), and the
// repeat counts as a skipped tool does.
func TestToolListBoundCountsToolsTakenUp(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"skipped", "repeated"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			m := Start(Options{
				Servers:   defaulted(config.MCPServer{Name: "many", Command: exe, Env: map[string]string{manyToolsServerEnv: mode}}),
				Logger:    testLogger(t),
				StartWait: time.Minute,
			})
			defer m.Close()
			if n := len(m.Tools()); n != maxServerTools {
				t.Fatalf("%d tools taken up (status %q); want all %d usable ones", n, m.Status()["mcp:many"], maxServerTools)
			}
		})
	}
}
