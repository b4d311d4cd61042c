package xdp_drop

// BanSeries is the bans' point of one interface (MeasurementBan): the
// frames the bans decided on it, cumulative since attach, and the counts
// of the instance's bans of its origin, since this process started them.
type BanSeries struct {
	Interface string
	Origin    string // OriginCrowdSec
	Action    string // ActionDrop, or ActionWouldDrop in a dry run
	Packets   uint64
	Bytes     uint64
	Active    int64 // bans in force
	Added     int64
	Removed   int64
	Expired   int64
	Refused   int64
	Synced    int64  // unix time of the last good pull; 0 before one
	Error     string // while the feed fails: why
	// Detect: a detection's point (origin detect), with Unreported and,
	// with Push (crowdsec_push), what became of the bans shared.
	Detect, Push                    bool
	Unreported                      int64
	AddedVerified, AddedUnverified  int64
	BudgetSpent                     int64
	Pushed, PushFailed, PushDropped int64
	PushOverBudget                  int64
	// Viewed: read by a console view (-watch, -status) of another
	// instance: Active is what the kernel holds in force, the other
	// counts are that instance's and not read. Never a field.
	Viewed bool
}

// PutTags adds the ban series' tags to tags.
func (s *BanSeries) PutTags(tags map[string]string) {
	tags[TagInterface] = s.Interface
	tags[TagOrigin] = s.Origin
	tags[TagAction] = s.Action
}

// PutFields adds the ban series' fields to fields.
func (s *BanSeries) PutFields(fields map[string]any) {
	fields[FieldPackets] = s.Packets
	fields[FieldBytes] = s.Bytes
	fields[FieldActive] = s.Active
	fields[FieldAdded] = s.Added
	fields[FieldRemoved] = s.Removed
	fields[FieldExpired] = s.Expired
	fields[FieldRefused] = s.Refused
	fields[FieldSynced] = s.Synced
	if s.Error != "" {
		fields[FieldError] = s.Error
	}
	if s.Detect {
		fields[FieldUnreported] = s.Unreported
		fields[FieldAddedVerified] = s.AddedVerified
		fields[FieldAddedUnverified] = s.AddedUnverified
		fields[FieldBudgetSpent] = s.BudgetSpent
	}
	if s.Push {
		fields[FieldPushed] = s.Pushed
		fields[FieldPushFailed] = s.PushFailed
		fields[FieldPushDropped] = s.PushDropped
		fields[FieldPushOverBudget] = s.PushOverBudget
	}
}
