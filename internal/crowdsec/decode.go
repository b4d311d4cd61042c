package crowdsec

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// ErrDecisionTooLarge is wrapped by Pull's error when one decision's JSON
// text (or one value of an unknown key) exceeds MaxDecisionBytes.
var ErrDecisionTooLarge = errors.New("decision too large")

// maxKeptText bounds Origin and Scenario as kept: what the LAPI sends
// beyond it is cut, so kept memory does not grow with the server's text.
const maxKeptText = 128

// maxInterned bounds the strings shared between the decisions of one answer.
const maxInterned = 4096

// wireDecision is a decision as the LAPI sends it (models.Decision), and
// as an alert posted to it carries one (without an id, which the LAPI gives).
type wireDecision struct {
	ID       int64  `json:"id,omitempty"`
	Origin   string `json:"origin"`
	Type     string `json:"type"`
	Scope    string `json:"scope"`
	Value    string `json:"value"`
	Duration string `json:"duration"`
	Scenario string `json:"scenario"`
}

// boundedReader fails a read that would take the decoder past limit, so the
// decoder's buffer never holds more than one element plus a read-ahead.
type boundedReader struct {
	r     io.Reader
	n     int64 // bytes read so far
	limit int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.n >= b.limit {
		return 0, ErrDecisionTooLarge
	}
	if room := b.limit - b.n; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	return n, err
}

// readAhead is what the decoder may have read past the element it decodes.
const readAhead = 4096

type decoder struct {
	c       *Client
	br      *boundedReader
	dec     *json.Decoder
	count   int
	delta   Delta
	intern  map[string]string
	scratch wireDecision
}

func (c *Client) decode(r io.Reader, startup bool) (Delta, error) {
	br := &boundedReader{r: r}
	d := &decoder{c: c, br: br, dec: json.NewDecoder(br), intern: make(map[string]string)}
	d.delta.Startup = startup
	d.allow()
	if err := d.expectDelim('{', "answer"); err != nil {
		return Delta{}, err
	}
	seen := false
	for d.dec.More() {
		d.allow()
		tok, err := d.dec.Token()
		if err != nil {
			return Delta{}, d.syntax(err)
		}
		key, _ := tok.(string)
		seen = seen || key == "new" || key == "deleted"
		switch key {
		case "new":
			d.delta.New, err = d.list(d.delta.New, true)
		case "deleted":
			if startup {
				// A full list replaces the state: its deleted (every expired
				// decision the LAPI keeps, up to days of them) lifts nothing
				// more, so it is read through, neither kept nor counted.
				err = d.elements(false, nil)
				break
			}
			d.delta.Deleted, err = d.list(d.delta.Deleted, false)
		default:
			// A field of a newer LAPI: skipped, within the element bound.
			d.allow()
			var skip json.RawMessage
			err = d.dec.Decode(&skip)
			if err != nil {
				err = d.syntax(err)
			}
		}
		if err != nil {
			return Delta{}, err
		}
	}
	if err := d.expectDelim('}', "answer"); err != nil {
		return Delta{}, err
	}
	if !seen {
		// Some other JSON API answered: an empty delta would read as "nothing changed".
		return Delta{}, errors.New(`answer is not the decisions stream: neither "new" nor "deleted" in it; is url the LAPI's address?`)
	}
	return d.delta, nil
}

// allow lets the decoder read one more element's worth from where it stands.
func (d *decoder) allow() {
	d.br.limit = d.dec.InputOffset() + MaxDecisionBytes + readAhead
}

func (d *decoder) expectDelim(want json.Delim, what string) error {
	tok, err := d.dec.Token()
	if err != nil {
		return d.syntax(err)
	}
	if got, ok := tok.(json.Delim); !ok || got != want {
		return fmt.Errorf("%s is not the decisions stream: expected %s, got %s; is url the LAPI's address?", what, quote.Value(string(want)), describe(tok))
	}
	return nil
}

func (d *decoder) syntax(err error) error {
	if errors.Is(err, ErrDecisionTooLarge) {
		return fmt.Errorf("%w: an element over %d bytes at offset %d; the LAPI's answer is not a decisions stream", ErrDecisionTooLarge, MaxDecisionBytes, d.dec.InputOffset())
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("answer ends early at offset %d: %v", d.dec.InputOffset(), err)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("answer is not valid JSON at offset %d: %v; is url the LAPI's address?", se.Offset, err)
	}
	return fmt.Errorf("reading the answer: %w", err)
}

// chunk is how many decisions are gathered before a new block is started:
// blocks copied once into an exact slice cost two times the result, where
// append's growth by a quarter would cost five.
const chunk = 4096

// list decodes "new" or "deleted", null or an array of decisions, and
// returns them after those of a previous key of the same name.
func (d *decoder) list(prev []Decision, isNew bool) ([]Decision, error) {
	blocks := [][]Decision{prev}
	kept := len(prev)
	if err := d.elements(isNew, func(dec Decision) {
		last := &blocks[len(blocks)-1]
		if len(*last) == cap(*last) {
			blocks = append(blocks, make([]Decision, 0, chunk))
			last = &blocks[len(blocks)-1]
		}
		*last = append(*last, dec)
		kept++
	}); err != nil {
		return nil, err
	}
	if kept == 0 {
		return nil, nil
	}
	out := make([]Decision, 0, kept)
	for _, b := range blocks {
		out = append(out, b...)
	}
	return out, nil
}

// elements decodes an array of decisions, passing each kept one to keep;
// a nil keep reads the array through and takes nothing of it.
func (d *decoder) elements(isNew bool, keep func(Decision)) error {
	d.allow()
	tok, err := d.dec.Token()
	if err != nil {
		return d.syntax(err)
	}
	if tok == nil {
		return nil
	}
	if delim, ok := tok.(json.Delim); !ok || delim != '[' {
		return fmt.Errorf("answer is not the decisions stream: a list of decisions expected, got %s", describe(tok))
	}
	for d.dec.More() {
		if keep == nil {
			d.allow()
			var skip json.RawMessage
			if err := d.dec.Decode(&skip); err != nil {
				return d.syntax(err)
			}
			continue
		}
		d.count++
		if d.count > d.c.cfg.MaxDecisions {
			return fmt.Errorf("%w: more than %d in one answer; the LAPI holds more decisions in force than the bound (twice bans.max): "+
				"raise max, or delete decisions on the LAPI ('cscli decisions list' shows those in force)", ErrTooManyDecisions, d.c.cfg.MaxDecisions)
		}
		d.allow()
		d.scratch = wireDecision{}
		err := d.dec.Decode(&d.scratch)
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			// The element was read whole; only its shape was wrong.
			d.ignore(IgnoredMalformed)
			continue
		}
		if err != nil {
			return d.syntax(err)
		}
		if dec, reason := d.convert(&d.scratch, isNew); reason != "" {
			d.ignore(reason)
		} else {
			keep(dec)
		}
	}
	d.allow()
	tok, err = d.dec.Token()
	if err != nil {
		return d.syntax(err)
	}
	if delim, ok := tok.(json.Delim); !ok || delim != ']' {
		return fmt.Errorf("answer is not the decisions stream: expected ']', got %s", describe(tok))
	}
	return nil
}

func (d *decoder) ignore(r Reason) {
	if d.delta.Ignored == nil {
		d.delta.Ignored = make(map[Reason]int)
	}
	d.delta.Ignored[r]++
}

// convert checks one decision; a non-empty Reason says why it is not kept.
func (d *decoder) convert(w *wireDecision, isNew bool) (Decision, Reason) {
	if w.Scope == "" && w.Value == "" {
		// null, {} or an object of other fields.
		return Decision{}, IgnoredMalformed
	}
	var prefix netip.Prefix
	switch {
	case strings.EqualFold(w.Scope, "ip"):
		a, err := netip.ParseAddr(w.Value)
		if err != nil {
			// cscli decisions import gives every row its --scope, default Ip,
			// ranges too; the LAPI matches such a value as the range it names.
			p, perr := netip.ParsePrefix(w.Value)
			if perr != nil {
				return Decision{}, IgnoredValue
			}
			prefix = unmapPrefix(p)
			break
		}
		if a.Zone() != "" {
			return Decision{}, IgnoredValue
		}
		a = a.Unmap()
		prefix = netip.PrefixFrom(a, a.BitLen())
	case strings.EqualFold(w.Scope, "range"):
		p, err := netip.ParsePrefix(w.Value)
		if err != nil {
			return Decision{}, IgnoredValue
		}
		prefix = unmapPrefix(p)
	default:
		return Decision{}, IgnoredScope
	}
	if !d.c.types[strings.ToLower(w.Type)] {
		return Decision{}, IgnoredType
	}
	dur, err := time.ParseDuration(w.Duration)
	if err != nil {
		if isNew {
			return Decision{}, IgnoredDuration
		}
		// Lifting needs only the prefix.
		dur = 0
	}
	return Decision{
		ID:       w.ID,
		Origin:   d.keep(w.Origin),
		Type:     d.keep(strings.ToLower(w.Type)),
		Scope:    d.keep(w.Scope),
		Value:    w.Value,
		Scenario: d.keep(w.Scenario),
		Prefix:   prefix,
		Duration: dur,
	}, ""
}

// unmapPrefix turns ::ffff:a.b.c.d/n (n >= 96) into a.b.c.d/(n-96); masked.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	a := p.Addr()
	if a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked()
	}
	return p.Masked()
}

// keep cuts s to maxKeptText and shares it with equal strings of the answer.
func (d *decoder) keep(s string) string {
	if len(s) > maxKeptText {
		s = strings.ToValidUTF8(s[:maxKeptText], "")
	}
	if v, ok := d.intern[s]; ok {
		return v
	}
	if len(d.intern) < maxInterned {
		d.intern[s] = s
	}
	return s
}

// describe names a token without quoting a large one.
func describe(tok json.Token) string {
	switch v := tok.(type) {
	case nil:
		return "null"
	case json.Delim:
		return quote.Value(string(v))
	case string:
		return "a string"
	case bool:
		return "a boolean"
	default:
		return "a number"
	}
}
