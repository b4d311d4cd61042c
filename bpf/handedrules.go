//go:build linux

package bpf

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
)

// HandedRules is what a stopping instance handed over once for all its
// interfaces: the descriptors of its rule maps, as HandedRules gave them,
// and what it said of them (the rules' fingerprint and the key the exact
// prefixes were laid out under).
type HandedRules struct {
	fds      []int
	describe string
}

// RulesHandedFrom makes the descriptors and the description a successor
// received, as Instance.HandedRules gave them, a HandedRules. AdoptRules
// owns them from then on.
func RulesHandedFrom(fds []int, describe string) *HandedRules {
	return &HandedRules{fds: fds, describe: describe}
}

func (h *HandedRules) close() {
	for _, fd := range h.fds {
		closeFD(fd)
	}
	h.fds = nil
}

// RuleMapsToHand returns the descriptors of the instance's rule maps and
// ban maps (the ban history last, when it holds a ban), to hand over once next to its interfaces' (Program.Handed), in
// the order AdoptRules reads them, and their description; nothing when the
// instance has neither loaded. The descriptors stay owned by the instance.
func (in *Instance) RuleMapsToHand() (fds []int, describe string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.ruleMaps != nil && in.rules != nil {
		for _, m := range in.ruleMaps.ordered() {
			fds = append(fds, m.FD())
		}
		describe = in.rulesFingerprint() + ":" + encodeKey(in.rules.exact.key)
	}
	if in.bans != nil {
		// Last, after a mark: a successor of an older build reads the rule
		// maps' description as before and refuses the extra descriptors.
		for _, m := range in.bans.maps.ordered() {
			fds = append(fds, m.FD())
		}
		describe += bansMark + in.bansFingerprint()
		if fd, d, ok := in.bans.historyToHand(); ok {
			fds, describe = append(fds, fd), describe+d
		}
		if f := in.bans.flow; f != nil {
			// Last of all: the FlowSpec rules in force go on in the successor.
			for _, m := range f.maps.ordered() {
				fds = append(fds, m.FD())
			}
			describe += flowMark + in.flowFingerprint()
		}
	}
	return fds, describe
}

// flowMark separates the FlowSpec maps' description from the rest.
const flowMark = "|flowspec:"

// takeFlow takes the FlowSpec maps' descriptors at the end of h's, and
// their description, off h; none when h has none.
func takeFlow(h *HandedRules) (fds []int, fp string, ok bool) {
	rest, fp, ok := cutLast(h.describe, flowMark)
	if !ok {
		return nil, "", false
	}
	h.describe = rest
	n := min(flowMapCount, len(h.fds))
	fds = h.fds[len(h.fds)-n:]
	h.fds = h.fds[:len(h.fds)-n]
	return fds, fp, true
}

// adoptFlow makes the handed FlowSpec maps t's when they fit, rebuilding
// the set in force from them; else t loads its own, empty. It owns fds.
func (in *Instance) adoptFlow(t *BanTable, spec *ebpf.CollectionSpec, fds []int, fp string) error {
	lay := newFlowLayout(in.policy.FlowSpec.max())
	if len(fds) == flowMapCount && fp == in.flowFingerprint() {
		if ms, err := mapsOfFDs(fds); err == nil {
			m := &flowMaps{Ctl: ms[0], Tables: ms[1], Rows: ms[2], Rules: ms[3], Pfx4: ms[4], Pfx6: ms[5], Cells: ms[6], Scratch: ms[7], saved: ms[8], peers: ms[9]}
			err = nil
			for name, mm := range m.byName() {
				if err == nil {
					err = spec.Maps[name].Compatible(mm)
				}
			}
			if err == nil {
				var s *flowState
				if s, err = flowStateOf(m, lay); err == nil {
					if err = s.rebuild(); err == nil {
						// The peers are the stopped instance's: this one writes its own.
						err = s.clearPeers()
					}
					if err == nil {
						t.flow = s
						return nil
					}
					s.close()
					m = nil
				}
			}
			if m != nil {
				m.Close()
			}
		}
	} else {
		for _, fd := range fds {
			closeFD(fd)
		}
	}
	s, err := newFlowState(spec, lay)
	if err != nil {
		return err
	}
	t.flow = s
	return nil
}

// bansMark separates the ban maps' description from the rule maps'.
const bansMark = "|bans:"

// banMapCount is how many maps banMaps holds.
const banMapCount = 4

// bansFingerprint names the layout of the ban maps: the program build's
// and the sizes the policy gives them.
func (in *Instance) bansFingerprint() string {
	h := sha256.New()
	h.Write(_XdpDropBytes)
	fmt.Fprintf(h, "bans %d %d\n", in.policy.Bans.max(), MaxBanAllow)
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// takeBans takes the ban maps' descriptors at the end of h's, and their
// description, off h; none when h has no ban maps.
func takeBans(h *HandedRules) (fds []int, fp string, ok bool) {
	rest, fp, ok := strings.Cut(h.describe, bansMark)
	if !ok {
		return nil, "", false
	}
	h.describe = rest
	n := min(banMapCount, len(h.fds))
	fds = h.fds[len(h.fds)-n:]
	h.fds = h.fds[:len(h.fds)-n]
	return fds, fp, true
}

// adoptBans makes the handed ban maps the instance's ban table when they
// fit: the bans in force then go on without a gap. It owns fds, and says
// why not otherwise.
func (in *Instance) adoptBans(fds []int, fp string, flowFDs []int, flowFP string) (adopted bool, why string) {
	closeFlow := func() {
		for _, fd := range flowFDs {
			closeFD(fd)
		}
		flowFDs = nil
	}
	defer closeFlow()
	if len(fds) < banMapCount {
		for _, fd := range fds {
			closeFD(fd)
		}
		return false, "the ban maps were not all handed over"
	}
	const own = ": this instance loads its own ban maps"
	ms, err := mapsOfFDs(fds)
	if err != nil {
		return false, "not ban maps: " + err.Error() + own
	}
	m := &banMaps{V4: ms[0], V6: ms[1], Buckets: ms[2], Bloom: ms[3]}
	switch {
	case !in.policy.Bans.On:
		why = "this instance has no bans"
	case in.bans != nil:
		why = "this instance has loaded its ban maps already"
	case fp != in.bansFingerprint():
		why = "the bans' max or the program version changed" + own
	}
	if why == "" {
		var spec *ebpf.CollectionSpec
		rules, err := in.compiledLocked()
		if err == nil {
			spec, err = in.specOf(rules)
		}
		for name, mm := range m.byName() {
			if err == nil {
				if err = spec.Maps[name].Compatible(mm); err != nil {
					err = fmt.Errorf("handed-over ban map %s does not fit: %w", name, err)
				}
			}
		}
		if err == nil {
			t := newBanTable(m, in.policy.Bans.max())
			if err = t.rebuild(); err == nil && in.policy.FlowSpec.On {
				ffds := flowFDs
				flowFDs = nil
				err = in.adoptFlow(t, spec, ffds, flowFP)
			}
			if err == nil {
				in.bans = t
				return true, ""
			}
		}
		why = err.Error() + own
	}
	m.Close()
	return false, why
}

// mapsOfFDs makes descriptors maps; it owns fds: on error they are closed.
func mapsOfFDs(fds []int) ([]*ebpf.Map, error) {
	ms := make([]*ebpf.Map, len(fds))
	var errs error
	for i, fd := range fds {
		// NewMapFromFD closes a descriptor that is not a map.
		m, err := ebpf.NewMapFromFD(fd)
		if err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		ms[i] = m
	}
	if errs != nil {
		for _, m := range ms {
			if m != nil {
				m.Close()
			}
		}
		return nil, errs
	}
	return ms, nil
}

// AdoptRules makes the rule maps a stopping instance handed over this
// instance's, and its ban maps (Bans) too when they came and fit, so that every interface's program shares them with the
// programs taken over in place, when they hold this instance's rules: the
// same rules (prefixes from files included) for the same program build.
// The instance then lays its tables out under the handed key, as the maps
// are. It reports whether it adopted them, or why not (said whole, for a
// log): then it loads its own at its first program, as without them. It owns h: what it does not
// keep it closes. Call it before the instance's first program.
func (in *Instance) AdoptRules(h *HandedRules) (adopted bool, why string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	defer h.close()
	flowFDs, flowFP, _ := takeFlow(h)
	histFD, hasHistory := takeHistory(h)
	banFDs, fp, hasBans := takeBans(h)
	rules, whyRules := false, ""
	if !hasBans || h.describe != "" || len(h.fds) > 0 {
		rules, whyRules = in.adoptRulesLocked(h)
	}
	if !hasBans {
		if hasHistory {
			closeFD(histFD)
		}
		for _, fd := range flowFDs {
			closeFD(fd)
		}
		return rules, whyRules
	}
	// After the rules: their layout is the handed one when adopted.
	bans, whyBans := in.adoptBans(banFDs, fp, flowFDs, flowFP)
	if hasHistory {
		if bans && whyBans == "" {
			in.bans.adoptHistory(histFD)
		} else {
			closeFD(histFD) // with the bans refused, offences start again
		}
	}
	switch {
	case whyBans == "":
		return rules || bans, whyRules
	case whyRules == "":
		return rules || bans, whyBans
	}
	return rules || bans, whyRules + "; " + whyBans
}

// adoptRulesLocked is AdoptRules for the rule maps.
func (in *Instance) adoptRulesLocked(h *HandedRules) (adopted bool, why string) {
	const own = ": this instance loads its own"
	if len(in.policy.Rules) == 0 {
		return false, "this instance has no rules"
	}
	if in.ruleMaps != nil || in.rules != nil {
		return false, "this instance has laid out its rules already"
	}
	fp, keyText, _ := strings.Cut(h.describe, ":")
	if fp != in.rulesFingerprint() {
		return false, "the rules or the program version changed" + own
	}
	key, err := decodeKey(keyText)
	if err != nil {
		return false, err.Error() + own
	}
	m, err := mapsFrom(h.fds)
	h.fds = nil
	if err != nil {
		return false, err.Error() + own
	}
	rules, err := compileRulesUnder(in.policy.Rules, key)
	if err == nil {
		var spec *ebpf.CollectionSpec
		if spec, err = in.specOf(rules); err == nil {
			err = m.compatible(spec)
		}
	}
	if err != nil {
		m.Close()
		return false, err.Error() + own
	}
	in.rules, in.ruleMaps = rules, m
	if in.limits != nil {
		// The handed maps bring the limiter's cells of their own.
		in.limits.Close()
		in.limits = nil
	}
	return true, ""
}

// rulesFingerprint names what the rule maps hold: the rules, with their
// prefixes (those of files included), and the program build and table
// settings that lay them out. With the key, it makes the layout.
func (in *Instance) rulesFingerprint() string {
	h := sha256.New()
	h.Write(_XdpDropBytes)
	fmt.Fprintf(h, "exact %d %d %d\n", exactRoom, maxExactGrowth, exactReach)
	for _, r := range in.policy.Rules {
		// A budget by value: its pointer differs from process to process.
		lim := r.Limit
		r.Limit = nil
		fmt.Fprintf(h, "rule %+v\n", r)
		if lim != nil {
			fmt.Fprintf(h, "limit %+v\n", *lim)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// ordered are the rule maps in the order they are handed over: the
// limiter's cells last, with limit rules, so that budgets go on too.
func (m *ruleMaps) ordered() []*ebpf.Map {
	all := []*ebpf.Map{m.PrefixBuckets, m.PrefixExact, m.PrefixV4, m.PrefixV6, m.Ports}
	if m.LimitState != nil {
		all = append(all, m.LimitState)
	}
	return all
}

// mapsFrom makes handed-over descriptors, in the order of ordered, rule
// maps. It owns fds: on error they are closed.
func mapsFrom(fds []int) (*ruleMaps, error) {
	if len(fds) != ruleMapCount && len(fds) != ruleMapCount+1 {
		for _, fd := range fds {
			closeFD(fd)
		}
		return nil, fmt.Errorf("%d descriptors, not the %d rule maps (%d with the limiter's cells)", len(fds), ruleMapCount, ruleMapCount+1)
	}
	ms, err := mapsOfFDs(fds)
	if err != nil {
		return nil, fmt.Errorf("not rule maps: %w", err)
	}
	m := &ruleMaps{PrefixBuckets: ms[0], PrefixExact: ms[1], PrefixV4: ms[2], PrefixV6: ms[3], Ports: ms[4]}
	if len(ms) > ruleMapCount {
		m.LimitState = ms[ruleMapCount]
	}
	return m, nil
}

// compatible says how the maps differ from those spec would load: their
// type, key, value and size, which the rules' tables set.
func (m *ruleMaps) compatible(spec *ebpf.CollectionSpec) error {
	switch limits := spec.Maps[xdpDropMapLimitState].MaxEntries > 1; {
	case limits && m.LimitState == nil:
		return errors.New("the handed-over rule maps lack the limiter's cells the rules need")
	case !limits && m.LimitState != nil:
		return errors.New("the handed-over rule maps hold limiter cells the rules do not use")
	}
	for name, mm := range m.byName() {
		if err := spec.Maps[name].Compatible(mm); err != nil {
			return fmt.Errorf("handed-over rule map %s does not fit the rules: %w", name, err)
		}
	}
	return nil
}

// runsOnShared reports whether prog runs on the instance's rule maps.
func (in *Instance) runsOnShared(prog *ebpf.Program) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.ruleMaps == nil {
		return false
	}
	info, err := prog.Info()
	if err != nil {
		return false
	}
	return usesMap(info, in.ruleMaps.PrefixBuckets)
}

func encodeKey(k hashKey) string {
	b := make([]byte, 0, 8*len(k))
	for _, w := range k {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	return hex.EncodeToString(b)
}

func decodeKey(s string) (hashKey, error) {
	var k hashKey
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 8*len(k) || b[0]&1 == 0 {
		return k, errors.New("the handed-over layout key is malformed")
	}
	for i := range k {
		k[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return k, nil
}
