package config

import (
	"reflect"
	"testing"
)

func TestParseOwned(t *testing.T) {
	got, err := ParseOwned("0, 2-4,7", 8)
	if err != nil || !reflect.DeepEqual(got, []int{0, 2, 3, 4, 7}) {
		t.Fatalf("ParseOwned = %v, %v", got, err)
	}
	for _, bad := range []string{"8", "x", "1-x", "-1"} {
		if _, err := ParseOwned(bad, 8); err == nil {
			t.Errorf("ParseOwned(%q) accepted", bad)
		}
	}
	if got := Split(8, 1, 3); !reflect.DeepEqual(got, []int{1, 4, 7}) {
		t.Fatalf("Split = %v", got)
	}
}
