package auth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeTokens(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// recheck makes the next Check read the file again at once (it otherwise
// looks at most once a second).
func recheck(tok *Tokens) {
	tok.mu.Lock()
	tok.checked = time.Time{}
	tok.mu.Unlock()
}

// TestTokens: a holder's token is admitted under its name, an unknown one
// is not, blank and # lines are skipped, the hash is never the token, and
// a line removed from the file revokes its token; a file that cannot be
// read any more keeps the tokens read last.
func TestTokens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, path, "# readers\n\nalice:"+HashToken("a-token")+"\n  bob:"+HashToken("b-token")+"  \n")
	tok, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]string{"a-token": "alice", "b-token": "bob"} {
		if who, ok := tok.Check(token); !ok || who != want {
			t.Errorf("Check(%q) = %q, %v; want %q", token, who, ok, want)
		}
		if who, ok := tok.CheckSum(Sum(token)); !ok || who != want {
			t.Errorf("CheckSum(Sum(%q)) = %q, %v; want %q", token, who, ok, want)
		}
	}
	for _, bad := range []string{"", "a-toke", "a-token ", HashToken("a-token")} {
		if who, ok := tok.Check(bad); ok || who != "" {
			t.Errorf("Check(%q) = %q, %v; want refused", bad, who, ok)
		}
	}
	if h := HashToken("abc"); h != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("HashToken(abc) = %s", h)
	}

	writeTokens(t, path, "alice:"+HashToken("a-token")+"\n")
	recheck(tok)
	if _, ok := tok.Check("b-token"); ok {
		t.Error("bob's token is admitted after his line was removed")
	}
	if _, ok := tok.Check("a-token"); !ok {
		t.Error("alice's token is refused after bob's line was removed")
	}
	os.Remove(path)
	recheck(tok)
	if _, ok := tok.Check("a-token"); !ok {
		t.Error("a file gone refuses the tokens read last")
	}
}

// TestTokensRefusesBadFiles: a malformed file is an error naming its line,
// a missing file names the flag.
func TestTokensRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	for text, want := range map[string]string{
		"alice\n":                   "line 1 is not name:sha256-hex",
		"# x\nalice:abc\n":          "line 2 is not name:sha256-hex",
		":" + HashToken("x") + "\n": "line 1 is not name:sha256-hex",
		"a:" + HashToken("x") + "\na:" + HashToken("y"): `line 2: name "a" twice`,
	} {
		path := filepath.Join(dir, "tokens")
		writeTokens(t, path, text)
		if _, err := LoadTokens(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadTokens(%q) = %v, want %q", text, err, want)
		}
	}
	if _, err := LoadTokens(filepath.Join(dir, "none")); err == nil || !strings.Contains(err.Error(), "--tokens-file") {
		t.Errorf("a missing file: %v", err)
	}
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:8080": true, "[::1]:80": true, "localhost:8080": true, "127.1.2.3:1": true,
		"0.0.0.0:8080": false, ":8080": false, "10.0.0.1:80": false, "[::]:80": false, "example.com:80": false, "127.0.0.1": false} {
		if got := LoopbackListen(addr); got != want {
			t.Errorf("LoopbackListen(%q) = %v, want %v", addr, got, want)
		}
	}
	for addr, want := range map[string]bool{"127.0.0.1:5555": true, "[::1]:5555": true, "192.0.2.1:1234": false, "localhost:1": false, "": false} {
		if got := LoopbackPeer(addr); got != want {
			t.Errorf("LoopbackPeer(%q) = %v, want %v", addr, got, want)
		}
	}
}
