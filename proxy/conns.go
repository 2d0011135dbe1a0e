package proxy

import (
	"net"
	"sync"
	"time"
)

// connTable remembers the upstream connections a provider client dialed, by
// local address, so that a streamed response can reach its own connection:
// fasthttp sets one read deadline before reading the response headers and
// offers no per-request handle afterwards. With the connection in hand the
// stream clears that deadline, applies its own idle deadline per event, and
// unblocks a pending read when the client goes away. Safe for concurrent use.
type connTable struct{ m sync.Map } // local address → *trackedConn

type trackedConn struct {
	net.Conn
	table *connTable
	key   string
	once  sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.table.m.Delete(c.key) })
	return c.Conn.Close()
}

// wrap registers c and returns the tracked connection.
func (t *connTable) wrap(c net.Conn) net.Conn {
	tc := &trackedConn{Conn: c, table: t, key: c.LocalAddr().String()}
	t.m.Store(tc.key, tc)
	return tc
}

// lookup returns the connection whose local address is addr, or nil.
func (t *connTable) lookup(addr net.Addr) *trackedConn {
	if addr == nil {
		return nil
	}
	v, ok := t.m.Load(addr.String())
	if !ok {
		return nil
	}
	return v.(*trackedConn)
}

// past is a deadline that has expired: setting it unblocks a pending read.
var past = time.Unix(1, 0)
