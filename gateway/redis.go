package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/llmgw/gateway/config"
)

// redisClient builds the one client of every shared store, for the
// configured mode: a single server, a Redis Cluster, or the master a set of
// sentinels names (followed across failovers). Every call is bounded by the
// config's timeout and is not retried: callers fail open.
func redisClient(r *config.Redis) (redis.UniversalClient, error) {
	tlsConf, err := redisTLS(r.TLS)
	if err != nil {
		return nil, err
	}
	o := &redis.UniversalOptions{
		Username: r.Username, Password: r.Password, DB: r.DB,
		DialTimeout: r.Timeout.D(), ReadTimeout: r.Timeout.D(), WriteTimeout: r.Timeout.D(),
		MaxRetries: -1, // fail fast: callers fail open
		// One dial per call: go-redis's default dials five times, 100 ms
		// apart, which held a call without a deadline of its own (an
		// approval's save and claim) 400 ms on a refused connection, twice
		// the timeout. The outage pause (below) is the retry.
		DialerRetries: 1,
		// A caller's deadline bounds the whole call, retries and
		// redirects of a cluster included.
		ContextTimeoutEnabled: true,
		TLSConfig:             tlsConf,
	}
	switch r.Mode {
	case "cluster":
		o.Addrs = r.Addrs
		co := o.Cluster()
		co.ClusterStateReloadInterval = clusterReload
		c := redis.NewClusterClient(co)
		c.AddHook(followFailover{c})
		// Per node: a dead master must not stop the calls to the others.
		c.OnNewNode(func(n *redis.Client) { n.AddHook(&outage{}) })
		return c, nil
	case "sentinel":
		o.Addrs, o.MasterName = r.Addrs, r.MasterName
		o.SentinelUsername, o.SentinelPassword = r.SentinelUsername, r.SentinelPassword
	default:
		o.Addrs = []string{r.Addr}
	}
	c := redis.NewUniversalClient(o)
	c.AddHook(&outage{})
	return c, nil
}

// outagePause is how long calls skip a server that a call found
// unreachable (refused, or silent past its deadline).
const outagePause = 250 * time.Millisecond

// errOutage is the error of a call skipped during an outage pause.
var errOutage = errors.New("redis: a call found the server unreachable a moment ago; not sent")

// outage makes a client's calls fail at once for outagePause after one
// found the server unreachable: a dial that failed, or a call that ran out
// of its deadline. Without it every call of an outage waits its deadline
// out (a silent server), or dials again (a refused one), and a request
// that makes several (a mixed turn's state, an approval's claim, the cache,
// the limits) waited several in a row, for every request. With it a request
// pays at most the one that found the outage; after each pause one call
// finds out whether the server answers again, and the others skip until it
// knows. A Redis error reply is an answer, not an outage. Callers handle
// errOutage as any failed call: the cache is bypassed, limits follow their
// fail mode, state is missing.
type outage struct {
	until atomic.Int64 // Unix ns; 0: calls go through
}

// admit reports whether a call may be sent now, and returns the context
// to send it with. After a pause, the caller that moves it on asks; the
// others skip until it knows. The caller that asks carries a mark in its
// context, so that what go-redis sends inside its call with the same hooks
// (a new connection's HELLO, AUTH, SELECT) goes too.
func (o *outage) admit(ctx context.Context) (context.Context, bool) {
	until := o.until.Load()
	if until == 0 || ctx.Value(probing{}) != nil {
		return ctx, true
	}
	now := time.Now()
	next := now.Add(outagePause).UnixNano()
	if now.UnixNano() < until || !o.until.CompareAndSwap(until, next) {
		return ctx, false
	}
	return context.WithValue(ctx, probing{}, next), true
}

// probing keys the context of the call that finds out whether the server
// answers again; its value is the end of the pause that call set (int64).
type probing struct{}

// done records a sent call's outcome.
func (o *outage) done(ctx context.Context, err error) {
	switch {
	case errors.Is(err, errOutage): // skipped inside: says nothing new
	case unreachable(err):
		o.until.Store(time.Now().Add(outagePause).UnixNano())
	case err == nil || !undecided(ctx, err):
		if o.until.Load() != 0 {
			o.until.Store(0) // it answered
		}
	default:
		// The call that was to find out ended without knowing (its
		// client left): the next call asks at once, unless the call's
		// own dials found the server unreachable meanwhile (DialHook).
		if set, ok := ctx.Value(probing{}).(int64); ok {
			o.until.CompareAndSwap(set, time.Now().UnixNano())
		}
	}
}

// unreachable reports whether err says the server was not reached or did
// not answer: a failed dial (refused, or not connected in time), or a
// read or write on the connection that ran past its deadline. The
// caller's own context ending (context.Canceled, context.DeadlineExceeded:
// a deadline that passed before the call was sent, or while it waited for
// a pooled connection) says nothing of the server.
func unreachable(err error) bool {
	var reply redis.Error
	if errors.As(err, &reply) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var op *net.OpError
	var ne net.Error
	return errors.As(err, &op) && op.Op == "dial" || errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// undecided reports whether a call's failure left the server's state
// unknown: the caller's context ended first.
func undecided(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// DialHook finds the server unreachable at a failed dial: go-redis retries
// a refused dial until the call's deadline, which then ends the call with
// the caller's context.DeadlineExceeded, which done cannot tell from a
// deadline of the caller's own.
func (o *outage) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil && unreachable(err) {
			o.until.Store(time.Now().Add(outagePause).UnixNano())
		}
		return c, err
	}
}

func (o *outage) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		ctx, ok := o.admit(ctx)
		if !ok {
			cmd.SetErr(errOutage)
			return errOutage
		}
		err := next(ctx, cmd)
		o.done(ctx, err)
		return err
	}
}

func (o *outage) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		ctx, ok := o.admit(ctx)
		if !ok {
			for _, c := range cmds {
				c.SetErr(errOutage)
			}
			return errOutage
		}
		err := next(ctx, cmds)
		o.done(ctx, err)
		return err
	}
}

// redisTLS returns the TLS config of [redis.tls], nil when it is off.
func redisTLS(t config.RedisTLS) (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // opt-in, documented as testing only
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("redis.tls.ca_file: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, errors.New("redis.tls.ca_file: no PEM certificate in the file")
		}
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("redis.tls.cert_file: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// limitsPrefix is the key prefix of the rate limits, budgets and usage. In
// a Redis Cluster it carries a hash tag: one Lua script checks and takes
// every counter a request touches (a tenant's, a key's, a global one), so
// they must all live in one slot. The other modes keep the plain prefix,
// so an upgrade does not reset spend already counted.
func limitsPrefix(r *config.Redis) string {
	if r.Mode == "cluster" {
		return r.Prefix + "{limits}:"
	}
	return r.Prefix
}

// clusterReload bounds how old a cluster client's map of slots to nodes
// gets without a failure that reloads it (go-redis's default is a minute).
const clusterReload = 10 * time.Second

// followFailover reloads a cluster client's map of slots to nodes when a
// call fails other than by a Redis reply (a refused connection, a
// timeout): go-redis reloads it on a MOVED or ASK reply, which a master
// that died never sends, so every call for its slots went on failing on
// it for up to a minute after its replica had taken over (found by a
// probe killing a master). The reload runs in the background, one at a
// time.
type followFailover struct{ c *redis.ClusterClient }

func (followFailover) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f followFailover) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		f.failed(err)
		return err
	}
}

func (f followFailover) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		f.failed(err)
		return err
	}
}

func (f followFailover) failed(err error) {
	var reply redis.Error
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) ||
		errors.As(err, &reply) && !redis.HasErrorPrefix(err, "CLUSTERDOWN") && !redis.HasErrorPrefix(err, "TRYAGAIN") {
		return // answered by Redis: the map is not the cause
	}
	f.c.ReloadState(context.Background())
}
