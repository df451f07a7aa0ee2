package lease

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// MemberKey is the key of member id of kind in the lease bucket.
func MemberKey(kind, id string) string { return kind + ".member." + id }

// LeaseKey is the key of partition p's lease of kind in the lease bucket.
func LeaseKey(kind string, p int) string { return kind + ".lease." + strconv.Itoa(p) }

// parseKey splits a key of the bucket into kind, what (member or lease)
// and the rest (member id or partition number).
func parseKey(key string) (kind, what, rest string, ok bool) {
	kind, tail, ok1 := strings.Cut(key, ".")
	what, rest, ok2 := strings.Cut(tail, ".")
	return kind, what, rest, ok1 && ok2 && rest != ""
}

// NewID returns a member id unique to this process: the host name (as a
// key token) and random hex, e.g. windower-7d9f-6c1a2b3c.
func NewID() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, host)
	if host == "" {
		host = "instance"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// memberValue is the value of a member key.
type memberValue struct {
	Since time.Time `json:"since"`
	// Info is what the member says of itself (its HTTP address).
	Info string `json:"info,omitempty"`
}

// leaseValue is the value of a lease key.
type leaseValue struct {
	Holder string `json:"holder"`
	// Epoch is the revision of the acquiring write; 0 in that write
	// itself (its revision is the epoch).
	Epoch    uint64    `json:"epoch,omitempty"`
	Acquired time.Time `json:"acquired"`
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs: cannot fail
	}
	return b
}

// conflict reports whether err is the server refusing a write whose
// expected last revision was not the key's (10071, or 10164 replicated).
func conflict(err error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) {
		return api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// ttlOf rounds d up to whole seconds (a message TTL's unit), at least 1s.
func ttlOf(d time.Duration) time.Duration {
	s := (d + time.Second - 1) / time.Second
	return max(s, 1) * time.Second
}

// subject is the subject a write of key goes to.
func subject(bucket, key string) string { return fmt.Sprintf("$KV.%s.%s", bucket, key) }
