package contract

// AmountKey is the payload member a submission's amount is read from.
const AmountKey = "amount_cents"

// MaxAmountCents bounds the magnitude of an amount that is summed: a
// larger one (or one that is not an integer) leaves the submission
// unpriced. 10^12 cents keeps the sums of a batch exact in the apply
// script's doubles, and Redis's int64 sums exact for any window.
const MaxAmountCents = 1_000_000_000_000

// AmountCents reads payload.amount_cents of a valid event's payload (the
// text the contract accepted: a JSON object without repeated keys, or
// empty). It reports ok only for a number whose value is an integer of at
// most MaxAmountCents in magnitude, read as the content fingerprint reads
// numbers (1e2 and 100 are the same amount, as they are the same content).
// Anything else — absent, a string, a fraction, too large — is not an
// error of the event, whose payload is the producer's own (docs/spec.md
// §2): the submission counts, and is counted as unpriced in the window's
// breakdown (docs/contract.md, "Amounts"). A payload the contract would
// not accept has no amount. Validate's callers get the amount from Check
// (Checked.AmountCents) without a second read of the payload. Safe for
// concurrent use.
func AmountCents(payload []byte) (cents int64, ok bool) {
	if len(payload) == 0 {
		return 0, false
	}
	c := getCanon(false)
	defer c.release()
	if !c.whole(payload) {
		return 0, false
	}
	return c.amount, c.priced
}

// amountOf is AmountCents of a member's value in canonical text: an
// integer (canonicalNumber writes every integral number as one) of at most
// MaxAmountCents in magnitude.
func amountOf(v []byte) (int64, bool) {
	n, ok := plainInt(v)
	if !ok || n > MaxAmountCents || n < -MaxAmountCents {
		return 0, false
	}
	return n, true
}
