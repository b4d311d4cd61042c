package bpf

import (
	"errors"
	"fmt"
)

// flowCapacity is why a family's rules do not fit the tables: the limit
// they would pass.
type flowCapacity struct {
	what  string // "classes of values" or "flow label boundaries"
	limit int
}

func (c *flowCapacity) Error() string {
	return fmt.Sprintf("the FlowSpec rules of a family need more than %d %s: split or simplify them", c.limit, c.what)
}

// fitFlowFamily compiles the longest prefix of rules (one family, in
// order) that fits the tables, as compileFlowFamily; n is its length, why
// the limit the rest would pass (nil when all fit). The classes and label
// boundaries a prefix needs never decrease as it grows (a longer prefix
// only splits classes), so the longest one is found by a binary search:
// at most 1 + log2(len(rules)) compiles, 11 for 1,024 rules.
func fitFlowFamily(lay flowLayout, rules []FlowRule, slots []uint32, v6 bool, rowBase, ruleBase uint32) (f *flowFamily, n int, why *flowCapacity, err error) {
	f, err = compileFlowFamily(lay, rules, slots, v6, rowBase, ruleBase)
	if !errors.As(err, &why) {
		return f, len(rules), nil, err
	}
	// rules[:lo] fits, rules[:hi] does not.
	lo, hi := 0, len(rules)
	f = &flowFamily{}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		c, err := compileFlowFamily(lay, rules[:mid], slots[:mid], v6, rowBase, ruleBase)
		var cap *flowCapacity
		switch {
		case err == nil:
			lo, f = mid, c
		case errors.As(err, &cap):
			hi, why = mid, cap
		default:
			return nil, 0, nil, err
		}
	}
	return f, lo, why, nil
}
