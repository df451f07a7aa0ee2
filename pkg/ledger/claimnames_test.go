package ledger

import "testing"

// TestClaimBucketNamesAreTheKeys: the names claimBucket keeps are the
// keys' own, for every bucket and day asked, and it keeps at most
// namedDays days of them.
func TestClaimBucketNamesAreTheKeys(t *testing.T) {
	s := NewStore(nil, Config{Keys: Keys{Prefix: "rf:1:"}})
	for day := int64(20000); day < 20000+2*namedDays; day++ {
		for _, b := range []int{0, 1, 777, ClaimBuckets - 1} {
			for range 2 { // built, then kept
				if got, want := s.claimBucket(b, day), s.keys.ClaimBucket(b, day); got != want {
					t.Fatalf("claimBucket(%d, %d) = %q, want %q", b, day, got, want)
				}
			}
		}
		if n := len(s.names.days); n > namedDays {
			t.Fatalf("%d days of names kept, want at most %d", n, namedDays)
		}
	}
	// A dropped day is built again when asked.
	if got, want := s.claimBucket(5, 20000), s.keys.ClaimBucket(5, 20000); got != want {
		t.Fatalf("claimBucket(5, 20000) after it was dropped = %q, want %q", got, want)
	}
}
