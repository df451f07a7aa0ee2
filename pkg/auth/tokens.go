package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// Tokens are the bearer tokens a --tokens-file admits: one `name:sha256-hex`
// line per holder (the hex SHA-256 of the token, never the token itself;
// blank lines and lines starting with # are skipped). The file is read
// again when it changes, so removing a line revokes its token within a
// second. Safe for concurrent use.
type Tokens struct {
	path string

	mu      sync.Mutex
	sums    map[string][sha256.Size]byte // name → hash
	mod     time.Time
	size    int64
	checked time.Time
}

// LoadTokens reads path; an unreadable or malformed file is an error
// naming the line.
func LoadTokens(path string) (*Tokens, error) {
	t := &Tokens{path: path}
	if err := t.reload(time.Now()); err != nil {
		return nil, err
	}
	return t, nil
}

// reload reads the file when its size or modification time changed.
func (t *Tokens) reload(now time.Time) error {
	fi, err := os.Stat(t.path)
	if err != nil {
		return fmt.Errorf("--tokens-file: %w", err)
	}
	t.checked = now
	if t.sums != nil && fi.ModTime().Equal(t.mod) && fi.Size() == t.size {
		return nil
	}
	b, err := os.ReadFile(t.path)
	if err != nil {
		return fmt.Errorf("--tokens-file: %w", err)
	}
	sums, err := parseTokens(b)
	if err != nil {
		return fmt.Errorf("--tokens-file %s: %w", t.path, err)
	}
	t.sums, t.mod, t.size = sums, fi.ModTime(), fi.Size()
	return nil
}

func parseTokens(b []byte) (map[string][sha256.Size]byte, error) {
	sums := map[string][sha256.Size]byte{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, hexSum, ok := strings.Cut(line, ":")
		sum, err := hex.DecodeString(hexSum)
		if !ok || name == "" || err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("line %d is not name:sha256-hex (64 hex digits of the token's SHA-256)", n)
		}
		if _, dup := sums[name]; dup {
			return nil, fmt.Errorf("line %d: name %q twice", n, name)
		}
		sums[name] = [sha256.Size]byte(sum)
	}
	return sums, sc.Err()
}

// Check returns the name of the holder of token, and whether it is
// admitted. Every known hash is compared in constant time, so the time
// taken says nothing of which, or how much of one, matched.
func (t *Tokens) Check(token string) (string, bool) {
	return t.CheckSum(Sum(token))
}

// Sum is the SHA-256 of token, the form CheckSum takes: a holder of a
// checked token (a session) keeps this rather than the token.
func Sum(token string) [sha256.Size]byte { return sha256.Sum256([]byte(token)) }

// CheckSum is Check for the token whose SHA-256 is sum (Sum): whether it
// is admitted now, the file read again if it changed.
func (t *Tokens) CheckSum(sum [sha256.Size]byte) (string, bool) {
	t.mu.Lock()
	if now := time.Now(); now.Sub(t.checked) >= time.Second {
		// A file that cannot be read now keeps the tokens read last.
		_ = t.reload(now)
	}
	sums := t.sums
	t.mu.Unlock()
	who, found := "", 0
	for name, s := range sums {
		if subtle.ConstantTimeCompare(sum[:], s[:]) == 1 {
			who, found = name, 1
		}
	}
	return who, found == 1
}

// HashToken returns the tokens-file form of token's hash.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}
