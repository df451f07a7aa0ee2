package contract

// Every entry point of the package reads JSON through the one scanner
// (scan.go). TestEntryPointsAgree holds them to one another and to the
// golden file: on every input of the golden corpus and on the schemas'
// examples, Validate and Check on both paths, Fingerprint, AmountCents,
// PeekEventID and StampIngestedAt say what the file says, and the walks
// below them (the value builder, the skip, the top-level walk, the
// canonical writer) agree on which texts are well-formed JSON.

import (
	"bytes"
	"fmt"
	"io/fs"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/schemas"
)

func TestEntryPointsAgree(t *testing.T) {
	var validators []*Validator
	for _, o := range goldenOptions {
		validators = append(validators, newValidator(t, o))
	}
	var diffs []string
	note := func(what string, raw []byte, diff string) {
		if diff != "" {
			diffs = append(diffs, fmt.Sprintf("%s: %s\ninput: %.300q", what, diff, raw))
		}
	}
	kinds := map[string]int{}
	for i, row := range readGolden(t) {
		what := fmt.Sprintf("golden row %d", i+1)
		note(what, row.Raw, agreeText(row.Raw))
		switch {
		case row.Payload:
			kinds["payload"]++
			note(what, row.Raw, agreePayload(row))
		case row.Event != nil:
			kinds["accepted"]++
			note(what, row.Raw, agreeRecord(validators[row.Opt], row))
		default:
			kinds["rejected"]++
			note(what, row.Raw, agreeRecord(validators[row.Opt], row))
		}
	}
	// The examples, as the examples tests read them (untrimmed): their
	// verdict is TestExamplesValid's and TestExamplesInvalid's.
	err := fs.WalkDir(schemas.FS, "examples", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := schemas.FS.ReadFile(p)
		if err != nil {
			return err
		}
		kinds["example"]++
		note(p, raw, agreeText(raw))
		if e, err := validators[0].Validate(raw, clock); err == nil {
			row := goldenRow{At: clock.UnixNano(), Raw: raw, Event: &goldenEvent{EventID: e.EventID}}
			row.FP = fmt.Sprintf("%016x", e.Fingerprint)
			row.Amount, row.Priced = AmountCents(e.Payload)
			note(p, raw, agreeRecord(validators[0], row))
		} else {
			r, _ := AsReject(err)
			row := goldenRow{At: clock.UnixNano(), Raw: raw, Reason: r.Reason, Detail: r.Detail, ID: r.EventID}
			note(p, raw, agreeRecord(validators[0], row))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range diffs {
		if i == 10 {
			t.Errorf("… and %d more", len(diffs)-10)
			break
		}
		t.Error(d)
	}
	t.Logf("inputs: %v", kinds)
	if kinds["payload"] < 1500 || kinds["accepted"] < 500 || kinds["rejected"] < 1000 || kinds["example"] < 40 {
		t.Errorf("the corpus is too thin: %v", kinds)
	}
}

// agreeText describes any disagreement of the walks on whether text is
// well-formed: the value builder (decodeValue), the skip, the top-level
// walk (objects only), the record reader (decodeRecord) and the canonical
// writer with either repeated-key rule.
func agreeText(text []byte) string {
	v, dup, err := decodeValue(text)
	_, isObject := v.(map[string]any)
	ok := err == nil
	r := reader{data: text}
	skipErr := r.skip()
	if skipErr == nil {
		skipErr = r.end()
	}
	topErr := topLevel(text, func([]byte, int, int) bool { return true })
	_, recErr := decodeRecord(text)
	switch {
	case (skipErr == nil) != ok:
		return fmt.Sprintf("skip says %v, decodeValue %v", skipErr, err)
	case (topErr == nil) != (ok && isObject):
		return fmt.Sprintf("topLevel says %v, decodeValue %v (an object: %v)", topErr, err, isObject)
	case (recErr == nil) != (ok && isObject):
		return fmt.Sprintf("decodeRecord says %v, decodeValue %v (an object: %v)", recErr, err, isObject)
	case canonWhole(text, true) != ok:
		return fmt.Sprintf("the canonical walk keeping the first key says %v, decodeValue %v", !ok, err)
	case canonWhole(text, false) != (ok && !dup):
		return fmt.Sprintf("the canonical walk refusing repeats says %v, decodeValue %v (repeat %v)", !(ok && !dup), err, dup)
	}
	return ""
}

// canonWhole reports whether the canonical writer takes text as one value,
// keeping the first of repeated keys or refusing them.
func canonWhole(text []byte, keepFirst bool) bool {
	c := getCanon(keepFirst)
	defer c.release()
	return c.whole(text)
}

// agreePayload describes any disagreement of Fingerprint and AmountCents
// with the golden row of a payload text.
func agreePayload(want goldenRow) string {
	e := Event{ReceiptID: "rcpt-1", Type: TypeSubmitted, OccurredAt: clock, PartitionKey: "store-1", Payload: want.Raw}
	if fp := fmt.Sprintf("%016x", Fingerprint(&e)); fp != want.FP {
		return fmt.Sprintf("Fingerprint %s, golden %s", fp, want.FP)
	}
	if _, dup, err := decodeValue(want.Raw); err != nil || dup {
		return "" // no amount is kept for a payload the contract refuses
	}
	if n, ok := AmountCents(want.Raw); n != want.Amount || ok != want.Priced {
		return fmt.Sprintf("AmountCents %d %v, golden %d %v", n, ok, want.Amount, want.Priced)
	}
	return ""
}

// agreeRecord describes any disagreement of Validate and Check, on the
// fast path and on the schema path, and of Fingerprint, AmountCents,
// PeekEventID and StampIngestedAt with the golden row of a record.
func agreeRecord(v *Validator, want goldenRow) string {
	at := time.Unix(0, want.At).UTC()
	for _, w := range []*Validator{v, schemaTwin(v)} {
		path := map[bool]string{false: "fast path", true: "schema path"}[w.schemaOnly]
		e, err := w.Validate(want.Raw, at)
		var c Checked
		cerr := w.Check(want.Raw, at, &c)
		if want.Event == nil {
			for name, err := range map[string]error{"Validate": err, "Check": cerr} {
				r, ok := AsReject(err)
				if !ok || r.Reason != want.Reason || r.Detail != want.Detail || r.EventID != want.ID {
					return fmt.Sprintf("%s (%s): %v, golden %s: %s (id %q)", name, path, err, want.Reason, want.Detail, want.ID)
				}
			}
			continue
		}
		if err != nil || cerr != nil {
			return fmt.Sprintf("%s rejects (Validate %v, Check %v), golden accepts", path, err, cerr)
		}
		if d := agreeEvent(&e, &c, want); d != "" {
			return path + ": " + d
		}
	}
	return agreeStamp(v, want, at)
}

// agreeEvent compares an accepted record's event and Checked with each
// other and with its golden row.
func agreeEvent(e *Event, c *Checked, want goldenRow) string {
	fp := fmt.Sprintf("%016x", e.Fingerprint)
	n, priced := AmountCents(e.Payload)
	switch {
	case fp != want.FP || e.EventID != want.Event.EventID:
		return fmt.Sprintf("event %s fingerprint %s, golden %s %s", e.EventID, fp, want.Event.EventID, want.FP)
	case Fingerprint(e) != e.Fingerprint:
		return fmt.Sprintf("Fingerprint %x, the event's %x", Fingerprint(e), e.Fingerprint)
	case c.Fingerprint != e.Fingerprint || string(c.EventID) != e.EventID || string(c.PartitionKey) != e.PartitionKey ||
		c.Type != e.Type || !c.OccurredAt.Equal(e.OccurredAt) || !bytes.Equal(c.Payload, e.Payload):
		return fmt.Sprintf("Check %+v, Validate %+v", *c, *e)
	case n != want.Amount || priced != want.Priced || c.AmountCents != n || c.Priced != priced:
		return fmt.Sprintf("amount: AmountCents %d %v, Check %d %v, golden %d %v", n, priced, c.AmountCents, c.Priced, want.Amount, want.Priced)
	case PeekEventID(want.Raw) != e.EventID:
		return fmt.Sprintf("PeekEventID %q, event %q", PeekEventID(want.Raw), e.EventID)
	}
	return ""
}

// agreeStamp checks StampIngestedAt on a record: it stamps exactly the
// well-formed objects without a top-level ingested_at, and a stamped valid
// record is the same event as the record received at the stamp's time.
func agreeStamp(v *Validator, want goldenRow, at time.Time) string {
	rec, err := decodeRecord(want.Raw)
	_, has := rec.fields[fieldIngestedAt]
	stamped, ok := StampIngestedAt(want.Raw, at)
	if ok != (err == nil && !has) {
		return fmt.Sprintf("StampIngestedAt stamps: %v; decodeRecord %v, ingested_at present %v", ok, err, has)
	}
	if !ok || want.Event == nil {
		return ""
	}
	e1, err1 := v.Validate(want.Raw, at)
	e2, err2 := v.Validate(stamped, at)
	if d := sameResult(e1, err1, e2, err2); d != "" {
		return "stamped record: " + d
	}
	return ""
}
