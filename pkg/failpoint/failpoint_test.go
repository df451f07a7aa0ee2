package failpoint

import (
	"errors"
	"testing"
)

func TestParseAndHit(t *testing.T) {
	s, err := Parse("windower.after-write=crash@every:3, publisher.after-put=crash@every:1", InProcess)
	if err != nil {
		t.Fatal(err)
	}
	var crashes int
	for i := 0; i < 9; i++ {
		if err := s.Hit(WindowerAfterWrite); err != nil {
			if !errors.Is(err, ErrCrash) {
				t.Fatalf("hit error %v is not ErrCrash", err)
			}
			crashes++
		}
	}
	if crashes != 3 {
		t.Fatalf("crashes = %d, want 3", crashes)
	}
	if err := s.Hit(ValidatorAfterPublish); err != nil {
		t.Fatalf("unset failpoint fired: %v", err)
	}
	if err := s.Hit(PublisherAfterPut); !errors.Is(err, ErrCrash) {
		t.Fatalf("every:1 did not fire: %v", err)
	}
	if got := s.Fired(); got[WindowerAfterWrite] != 3 || got[PublisherAfterPut] != 1 {
		t.Fatalf("fired = %v", got)
	}
	var nilSet *Set
	if err := nilSet.Hit(WindowerAfterWrite); err != nil {
		t.Fatal("nil set fired")
	}
}

func TestParseErrors(t *testing.T) {
	for _, spec := range []string{"nope=crash@every:3", "windower.after-write", "windower.after-write=crash@every:0", "windower.after-write=panic", "windower.after-write=stop@every:x"} {
		if _, err := Parse(spec, InProcess); err == nil {
			t.Errorf("Parse(%q) accepted", spec)
		}
	}
}

// TestStopInProcessIsACrash: stop@every:N parses; in-process (no process
// of its own to stop) it fires as a crash.
func TestStopInProcessIsACrash(t *testing.T) {
	s, err := Parse("windower.before-write=stop@every:2", InProcess)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Hit(WindowerBeforeWrite); err != nil {
		t.Fatalf("first hit fired: %v", err)
	}
	if err := s.Hit(WindowerBeforeWrite); !errors.Is(err, ErrCrash) {
		t.Fatalf("second hit: %v, want ErrCrash", err)
	}
}
