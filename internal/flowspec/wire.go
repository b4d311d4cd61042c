//go:build linux

package flowspec

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/xdp-drop/xdp_drop/bpf"
)

// The speaker and the plugin talk over a stream socket pair: each message
// a 4-octet big-endian length, then that many octets of JSON.

// maxFrame bounds a message: 2 families of max_rules accepted and
// 4×max_rules refused rules with their text fit with room to spare.
const maxFrame = 32 << 20

// Message types.
const (
	// Plugin to speaker.
	msgConfig  = "config"  // Config, Adopted, Local: first, once
	msgAdopt   = "adopt"   // Rules
	msgLocal   = "local"   // Local
	msgApplied = "applied" // Seq, Err, Refused, Capacity
	// Speaker to plugin.
	msgStarted = "started" // Err ("" when the sessions are configured)
	msgApply   = "apply"   // Seq, Rules
	msgPeers   = "peers"   // Peers (every second: also the speaker's heartbeat)
	msgRules   = "rules"   // States
	msgLog     = "log"     // Level, Msg
)

type frame struct {
	T        string         `json:"t"`
	Seq      uint64         `json:"seq,omitempty"`
	Config   *wireConfig    `json:"config,omitempty"`
	Rules    []bpf.FlowRule `json:"rules,omitempty"`
	Local    []netip.Prefix `json:"local,omitempty"`
	Err      string         `json:"err,omitempty"`
	Refused  []string       `json:"refused,omitempty"`
	Capacity bool           `json:"capacity,omitempty"`
	Peers    []PeerState    `json:"peers,omitempty"`
	States   []RuleState    `json:"states,omitempty"`
	Level    byte           `json:"level,omitempty"`
	Msg      string         `json:"msg,omitempty"`
	Adopted  []bpf.FlowRule `json:"adopted,omitempty"`
}

// wireConfig is Config without its funcs.
type wireConfig struct {
	LocalAS               uint32
	RouterID              netip.Addr
	MaxRules              int
	OnlyLocalDestinations bool
	Peers                 []Peer
	Sampling              bool
	HoldTime, RestartTime time.Duration
}

func toWire(c Config) *wireConfig {
	return &wireConfig{
		LocalAS: c.LocalAS, RouterID: c.RouterID, MaxRules: c.MaxRules, OnlyLocalDestinations: c.OnlyLocalDestinations,
		Peers: c.Peers, Sampling: c.Sampling, HoldTime: c.HoldTime, RestartTime: c.RestartTime,
	}
}

func (w *wireConfig) config() Config {
	return Config{
		LocalAS: w.LocalAS, RouterID: w.RouterID, MaxRules: w.MaxRules, OnlyLocalDestinations: w.OnlyLocalDestinations,
		Peers: w.Peers, Sampling: w.Sampling, HoldTime: w.HoldTime, RestartTime: w.RestartTime,
	}
}

// conn is one end of the socket pair; writes are serialized and bounded
// in time (a peer that reads nothing fails them instead of blocking).
type conn struct {
	c  *net.UnixConn
	mu sync.Mutex
}

var errFrameSize = errors.New("message over the size limit")

func (c *conn) write(f *frame, within time.Duration) error {
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("encode %s: %w", f.T, err)
	}
	if len(b) > maxFrame {
		return fmt.Errorf("%s: %w (%d octets)", f.T, errFrameSize, len(b))
	}
	msg := make([]byte, 4, 4+len(b))
	binary.BigEndian.PutUint32(msg, uint32(len(b)))
	msg = append(msg, b...)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.c.SetWriteDeadline(time.Now().Add(within)); err != nil {
		return err
	}
	_, err = c.c.Write(msg)
	return err
}

// read reads one message; within 0: no deadline. Called from one
// goroutine only.
func (c *conn) read(within time.Duration) (*frame, error) {
	var dl time.Time
	if within > 0 {
		dl = time.Now().Add(within)
	}
	if err := c.c.SetReadDeadline(dl); err != nil {
		return nil, err
	}
	var h [4]byte
	if _, err := io.ReadFull(c.c, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if n > maxFrame {
		return nil, fmt.Errorf("%w (%d octets)", errFrameSize, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c.c, b); err != nil {
		return nil, err
	}
	f := &frame{}
	if err := json.Unmarshal(b, f); err != nil {
		return nil, fmt.Errorf("decode a message: %w", err)
	}
	return f, nil
}

func (c *conn) close() { c.c.Close() }

// finite replaces rates JSON cannot carry (a refused rule may hold one).
func finite(r *bpf.FlowRule) {
	if math.IsNaN(r.Rate) || math.IsInf(r.Rate, 0) {
		r.Rate = 0
	}
}

// refusedError is the plugin's capacity answer, as the receiver expects it.
type refusedError struct {
	msg string
	ids []string
}

func (e *refusedError) Error() string        { return e.msg }
func (e *refusedError) RefusedIDs() []string { return e.ids }
