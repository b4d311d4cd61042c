//go:build linux

package bpf

// ContinueBans makes the instance go on with the ban table of from, the
// instance it follows (a generation of prefix files before it), when it
// has none yet: the bans in force and the allowed prefixes stay, and the
// programs loaded on either share the same maps. The table is shared, not
// copied: from may be closed after, and the maps close with the last
// instance that holds them.
func (in *Instance) ContinueBans(from *Instance) {
	if from == nil || from == in || !in.policy.Bans.On {
		return
	}
	from.mu.Lock()
	t := from.bans
	from.mu.Unlock()
	if t == nil {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.bans != nil {
		return
	}
	t.mu.Lock()
	t.holders++
	t.mu.Unlock()
	in.bans = t
}

// release drops an instance's hold on the table: the maps close with the
// last holder.
func (t *BanTable) release() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.holders > 0 {
		t.holders--
		return nil
	}
	return t.maps.Close()
}
