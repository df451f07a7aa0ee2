package contract

// Rule is one check of the rejection order: Validate and Check run the
// checks of Rules in order and the first one a record fails decides its
// reason.
type Rule struct {
	// Step is the check's number. A step may hold several rules: they are
	// one check whose outcomes are told apart in the listed order (for
	// step 6, the reasons a JSON Schema violation maps to; when a record
	// breaks several, the earliest listed wins).
	Step int
	// Check says, in one line, what the record fails.
	Check string
	// Reason is the rejection reason of a record that fails it.
	Reason Reason
}

// schemaStep is the step of Rules that holds the version's JSON Schema.
const schemaStep = 6

// Rules is the rejection order of docs/spec.md §2, defined here once.
// docs/contract.md lists the same rows (rules_test.go holds the two
// equal); the comments of Validate and the code of validate.go refer to
// the steps by number. conflicting_duplicate is not a check of one record
// and is not listed.
var Rules = []Rule{
	{1, "more than 64 KiB", ReasonTooLarge},
	{2, "not one well-formed JSON object in UTF-8", ReasonMalformedJSON},
	{3, "a repeated key, a case variant of a field, or nesting deeper than 256 levels", ReasonInvalidField},
	{4, "no `schema_version`", ReasonMissingField},
	{4, "`schema_version` a plain integer beyond 2^53", ReasonInvalidField},
	{4, "`schema_version` not the integer 1 or 2", ReasonUnsupportedSchema},
	{5, "v1 `occurred_minute` with a fraction or exponent, or beyond 2^53", ReasonInvalidField},
	{6, "the version's JSON Schema: a required field absent", ReasonMissingField},
	{6, "the version's JSON Schema: `type` not one of the three names", ReasonUnknownType},
	{6, "the version's JSON Schema: a time field of the wrong kind or not a timestamp (this includes an `occurred_minute` before 2000)", ReasonBadTimestamp},
	{6, "the version's JSON Schema: any other violation", ReasonInvalidField},
	{7, "event time before 2000 or in year 9999 or later, `occurred_at` not in UTC, a leap second; then the same range for a producer's `ingested_at`", ReasonBadTimestamp},
	{8, "event time more than 5 minutes after the received time; then `ingested_at` more than 5 minutes after the received time; then event time more than 5 minutes after `ingested_at`", ReasonFutureTimestamp},
}

// reasonRank orders the reasons a schema violation can map to (the rules
// of step 6, in order): when a record breaks several, the lowest rank is
// reported.
var reasonRank = func() map[Reason]int {
	m := make(map[Reason]int)
	for _, r := range Rules {
		if r.Step == schemaStep {
			if _, dup := m[r.Reason]; !dup {
				m[r.Reason] = len(m)
			}
		}
	}
	return m
}()
