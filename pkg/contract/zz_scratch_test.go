package contract

import (
	"fmt"
	"io/fs"
	"testing"
	"time"

	"github.com/receiptflow/receiptflow/schemas"
)

func TestScratch(t *testing.T) {
	v, err := NewValidator(Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	fs.WalkDir(schemas.FS, "examples", func(p string, d fs.DirEntry, err error) error {
		if d.IsDir() {
			return nil
		}
		b, _ := schemas.FS.ReadFile(p)
		e, err := v.Validate(b, now)
		if r, ok := AsReject(err); ok {
			fmt.Printf("%-70s %-20s id=%q %s\n", p, r.Reason, r.EventID, r.Detail)
		} else {
			fmt.Printf("%-70s OK %v %x\n", p, e.OccurredAt, e.Fingerprint)
		}
		return nil
	})
}
