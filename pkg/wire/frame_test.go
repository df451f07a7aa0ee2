package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"testing"
)

func goldFrame() Frame {
	return Frame{Partition: 3, Records: []FrameRecord{
		{Kind: FrameSubmission, RawSeq: 41, Time: 1767225600000, EventID: "e-1", Type: "submitted", Fingerprint: 0x0102030405060708,
			Store: "store-7", AmountCents: -1299, Priced: true, SourceID: "pos-1", Received: 1767225601000},
		{Kind: FrameHeartbeat, RawSeq: 42, Time: 1767225590000, SourceID: "host:/data/x.ndjson", Received: 1767225600500},
		{Kind: FrameSubmission, RawSeq: 43, Time: 1767225600001, EventID: "e-4", Type: "submitted", Fingerprint: 9, Store: "s",
			SourceID: "pos-1", Received: 1767225601000},
		{Kind: FrameOther, RawSeq: 57, Time: 1767225500000, EventID: "e-2", Type: "viewed", Fingerprint: 1, Received: 1767225602000},
		{Kind: FrameHeartbeat, RawSeq: 58, Time: 1767225590001, SourceID: "pos-1", Received: 1767225602001, Leave: true},
		{Kind: FrameOther, RawSeq: 60, Time: 1767229200001, EventID: "e-3", Type: "future_type", Fingerprint: ^uint64(0),
			SourceID: "pos-1", Received: 1767225602001},
	}}
}

// goldV2Frame is goldFrame as version 2 could hold it: no sources, no
// broker times, and without the leaving heartbeat.
func goldV2Frame() Frame {
	f := goldFrame()
	f.Records = append(f.Records[:4:4], f.Records[5:]...)
	for i := range f.Records {
		f.Records[i].SourceID, f.Records[i].Received = "", 0
	}
	return f
}

// goldV1Frame is goldFrame as version 1 could hold it: no stores, no
// amounts, and without the record version 1 cannot tell from another.
func goldV1Frame() Frame {
	f := goldV2Frame()
	f.Records = append(f.Records[:2:2], f.Records[3:]...)
	f.Records[0].Store, f.Records[0].AmountCents, f.Records[0].Priced = "", 0, false
	return f
}

// goldV1 is goldV1Frame as version 1 wrote it. It must decode to
// goldV1Frame in every later version of this code: VALID keeps frames for
// the retention period, and a windower upgraded meanwhile reads them.
const goldV1 = "010304732980a0d5edee6603652d310108070605040302010068019f9c016f0f9ffe0a03652d32030100000000000000006f03c2d4c30303652d33000b6675747572655f74797065ffffffffffffffff00"

func TestFrameRoundTrip(t *testing.T) {
	f := goldFrame()
	b := AppendFrame(nil, &f)
	got, err := DecodeFrame(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, f) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, f)
	}
	empty := Frame{Partition: 7}
	got, err = DecodeFrame(AppendFrame(nil, &empty))
	if err != nil || got.Partition != 7 || len(got.Records) != 0 {
		t.Fatalf("empty frame: %+v %v", got, err)
	}
}

func TestFrameVersion1StillDecodes(t *testing.T) {
	b, err := hex.DecodeString(goldV1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeFrame(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := goldV1Frame(); !reflect.DeepEqual(got, want) {
		t.Fatalf("version 1 frame:\n got %+v\nwant %+v", got, want)
	}
}

// goldV2 is goldFrame as version 2 writes it; a change of the encoding is
// a new version.
const goldV2 = "020305732980a0d5edee6603652d31010807060504030201000773746f72652d3701a51468019f9c017301a29c0103652d34010900000000000000000173006f0ec19a0c03652d32030100000000000000006f03c2d4c30303652d33000b6675747572655f74797065ffffffffffffffff00"

// goldV3 is goldFrame as version 3 writes it; a change of the encoding is
// a new version.
const goldV3 = "0303060305706f732d3113686f73743a2f646174612f782e6e646a736f6e00732980a0d5edee6600d0afd5edee6603652d31010807060504030201000773746f72652d3701a51468019f9c0101e707007301a29c0100e80703652d34010900000000000000000173006f0ec19a0c02d00f03652d32030100000000000000006801a2fe0a0002016f02a0d6b803000003652d33000b6675747572655f74797065ffffffffffffffff00"

func TestFrameVersion3Encoding(t *testing.T) {
	f := goldFrame()
	if enc := hex.EncodeToString(AppendFrame(nil, &f)); FrameVersion == 3 && enc != goldV3 {
		t.Fatalf("version 3 encoding changed:\n got %s\nwant %s", enc, goldV3)
	}
	b, _ := hex.DecodeString(goldV3)
	got, err := DecodeFrame(b)
	if err != nil || !reflect.DeepEqual(got, f) {
		t.Fatalf("version 3 frame: %v\n got %+v\nwant %+v", err, got, f)
	}
	for name, bad := range map[string]func([]byte){
		// The leaving heartbeat: kind, seq +1, time, source 0, +2 ms, flag.
		"leave flag 2": func(b []byte) { b[bytes.Index(b, []byte{'h', 1, 0xa2, 0xfe, 0x0a, 0, 2, 1})+7] = 2 },
		// After the table's empty id: kind, seq 41, 6 bytes of time, source index.
		"source index 9":   func(b []byte) { b[bytes.Index(b, []byte("ndjson"))+len("ndjson")+9] = 9 },
		"source count big": func(b []byte) { b[3] = 0x7f },
	} {
		c := bytes.Clone(b)
		bad(c)
		if _, err := DecodeFrame(c); !errors.Is(err, ErrFrame) {
			t.Errorf("%s: err %v, want ErrFrame", name, err)
		}
	}
}

func TestFrameVersion2StillDecodes(t *testing.T) {
	f := goldV2Frame()
	b, _ := hex.DecodeString(goldV2)
	got, err := DecodeFrame(b)
	if err != nil || !reflect.DeepEqual(got, f) {
		t.Fatalf("version 2 frame: %v\n got %+v\nwant %+v", err, got, f)
	}
	// A bad priced flag is a malformed frame.
	bad := bytes.Clone(b)
	i := bytes.Index(bad, []byte("store-7")) + len("store-7")
	bad[i] = 2
	if _, err := DecodeFrame(bad); !errors.Is(err, ErrFrame) {
		t.Fatalf("priced flag 2: err %v, want ErrFrame", err)
	}
}

func TestFrameNewerVersionRefused(t *testing.T) {
	f := goldFrame()
	b := AppendFrame(nil, &f)
	for _, v := range []byte{0, FrameVersion + 1, 255} {
		b[0] = v
		if _, err := DecodeFrame(b); !errors.Is(err, ErrFrameVersion) {
			t.Errorf("version %d: err %v, want ErrFrameVersion", v, err)
		}
	}
}

func TestFrameMalformed(t *testing.T) {
	f := goldFrame()
	b := AppendFrame(nil, &f)
	cases := map[string][]byte{
		"empty":          nil,
		"cut":            b[:len(b)-3],
		"trailing bytes": append(append([]byte(nil), b...), 0),
		"huge count":     {FrameVersion, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"bad kind":       {FrameVersion, 0, 1, 'x', 1, 0},
		"wrong window":   AppendFrame(nil, &Frame{Records: []FrameRecord{{Kind: FrameOther, RawSeq: 1, EventID: "a", Type: "viewed"}}}),
		"no event id":    AppendFrame(nil, &Frame{Records: []FrameRecord{{Kind: FrameOther, RawSeq: 1, Type: "viewed"}}}),
	}
	w := cases["wrong window"]
	w[len(w)-1] = 2 // varint 1: one hour off
	for name, c := range cases {
		if _, err := DecodeFrame(c); !errors.Is(err, ErrFrame) {
			t.Errorf("%s: err %v, want ErrFrame", name, err)
		}
	}
}

func TestFrameMsgID(t *testing.T) {
	if got := FrameMsgID(3, 41, 60); got != "vf/3/41-60" {
		t.Fatalf("FrameMsgID = %q", got)
	}
}

// FuzzFrame: any bytes decode or fail with ErrFrame/ErrFrameVersion, never
// panic; what decodes encodes to bytes that decode to the same frame.
func FuzzFrame(f *testing.F) {
	g := goldFrame()
	f.Add(AppendFrame(nil, &g))
	f.Add([]byte{FrameVersion, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeFrame(b)
		if err != nil {
			if !errors.Is(err, ErrFrame) && !errors.Is(err, ErrFrameVersion) {
				t.Fatalf("error %v is neither ErrFrame nor ErrFrameVersion", err)
			}
			return
		}
		again, err := DecodeFrame(AppendFrame(nil, &fr))
		if err != nil {
			t.Fatalf("re-encoded frame does not decode: %v", err)
		}
		if !reflect.DeepEqual(again, fr) {
			t.Fatalf("re-encoded frame differs:\n got %+v\nwant %+v", again, fr)
		}
	})
}
