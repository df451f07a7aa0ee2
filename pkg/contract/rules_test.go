package contract

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// docRules reads the rejection-order table of docs/contract.md: the rows
// "| n | check | `reason` |" after the header "| # | check | reason |".
func docRules(t *testing.T, path string) []Rule {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rules []Rule
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "| # | check | reason |":
			in = true
			continue
		case !in:
			continue
		case strings.HasPrefix(line, "|---"):
			continue
		case !strings.HasPrefix(line, "|"):
			return rules
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 3 {
			t.Fatalf("%s: table row %q does not have three cells", path, line)
		}
		step, err := strconv.Atoi(strings.TrimSpace(cells[0]))
		if err != nil {
			t.Fatalf("%s: table row %q: step: %v", path, line, err)
		}
		reason := strings.Trim(strings.TrimSpace(cells[2]), "`")
		rules = append(rules, Rule{Step: step, Check: strings.TrimSpace(cells[1]), Reason: Reason(reason)})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rules
}

// TestRulesMatchDocs holds the one written copy of the rejection order,
// the table of docs/contract.md, to Rules: the same rows in the same order.
func TestRulesMatchDocs(t *testing.T) {
	const path = "../../docs/contract.md"
	doc := docRules(t, path)
	if len(doc) != len(Rules) {
		t.Errorf("%s lists %d rules, Rules has %d", path, len(doc), len(Rules))
	}
	for i := range min(len(doc), len(Rules)) {
		if doc[i] != Rules[i] {
			t.Errorf("rule %d: %s has\n\t%d | %s | %s\nRules has\n\t%d | %s | %s",
				i+1, path, doc[i].Step, doc[i].Check, doc[i].Reason, Rules[i].Step, Rules[i].Check, Rules[i].Reason)
		}
	}
}

// TestRulesWellFormed checks the table itself: steps ascend from 1, every
// reason is a known one, and every reason of a single record appears.
func TestRulesWellFormed(t *testing.T) {
	seen := make(map[Reason]bool)
	prev := 0
	for i, r := range Rules {
		if r.Step != prev && r.Step != prev+1 {
			t.Errorf("rule %d: step %d after step %d", i+1, r.Step, prev)
		}
		prev = r.Step
		if _, ok := sentinels[r.Reason]; !ok {
			t.Errorf("rule %d: unknown reason %q", i+1, r.Reason)
		}
		seen[r.Reason] = true
	}
	if prev != 8 {
		t.Errorf("Rules ends at step %d, want 8", prev)
	}
	for reason := range sentinels {
		if !seen[reason] && reason != ReasonConflictingDuplicate {
			t.Errorf("reason %q is in no rule", reason)
		}
	}
}

// TestFastFieldOrder checks that the fast path's field indexes follow
// knownFields, so that requiredMask and the seen mask name the same fields.
func TestFastFieldOrder(t *testing.T) {
	for i, name := range knownFields {
		if got := fastField([]byte(name)); got != i {
			t.Errorf("fastField(%q) = %d, want %d (its index in knownFields)", name, got, i)
		}
	}
	if fastField([]byte("Event_Id")) != -1 {
		t.Error("fastField takes a case variant")
	}
}
