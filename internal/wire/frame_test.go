package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func frameBytes(typ byte, op Op, id uint32, meta, data []byte) []byte {
	b := AppendHeader(nil, typ, 0, op, id, meta, data)
	b = append(b, meta...)
	return append(b, data...)
}

func TestFrameRoundTrip(t *testing.T) {
	meta, err := Marshal(ReadReq{Tok: 1, Handle: 42, Offset: 5 << 30, Length: 4096})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("pando"), 1000)
	f, err := ReadFrame(bytes.NewReader(frameBytes(TypeRequest, OpRead, 7, meta, data)))
	if err != nil {
		t.Fatal(err)
	}
	if f.Type != TypeRequest || f.Op != OpRead || f.ID != 7 || !bytes.Equal(f.Data, data) {
		t.Fatalf("frame changed in transit: %+v", f.Header)
	}
	var r ReadReq
	if err := Unmarshal(f.Meta, &r); err != nil {
		t.Fatal(err)
	}
	if r.Offset != 5<<30 || r.Handle != 42 {
		t.Fatalf("decoded %+v", r)
	}
}

func TestMalformedFrames(t *testing.T) {
	good := frameBytes(TypeRequest, OpPing, 1, []byte{0xa0}, []byte("x"))
	cases := map[string]func(b []byte){
		"unknown type":   func(b []byte) { b[0] = 9 },
		"unknown flag":   func(b []byte) { b[1] |= 0x80 },
		"reserved bytes": func(b []byte) { b[23] = 1 },
		"huge meta":      func(b []byte) { b[8] = 0xff },
		"huge data":      func(b []byte) { b[12] = 0x7f },
		"bad crc":        func(b []byte) { b[len(b)-1] ^= 0xff },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			b := bytes.Clone(good)
			mutate(b)
			_, err := ReadFrame(bytes.NewReader(b))
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("got %v, want ErrMalformed", err)
			}
		})
	}
	if _, err := ReadFrame(bytes.NewReader(good[:25])); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated frame: got %v", err)
	}
}

func TestPreface(t *testing.T) {
	b := EncodePreface(Preface{Version: Version, Channel: ChannelData})
	p, err := ReadPreface(bytes.NewReader(b))
	if err != nil || p.Channel != ChannelData {
		t.Fatalf("preface: %v %+v", err, p)
	}
	b = EncodePreface(Preface{Version: Version + 1})
	if _, err := ReadPreface(bytes.NewReader(b)); !errors.Is(err, ErrVersion) {
		t.Fatalf("other version: got %v", err)
	}
	if _, err := ReadPreface(bytes.NewReader([]byte("GET / HTTP/1.1\r\n"))); !errors.Is(err, ErrNotPando) {
		t.Fatalf("http: got %v", err)
	}
}

func TestUnmarshalRefusesHostileCBOR(t *testing.T) {
	var r PathReq
	for name, b := range map[string][]byte{
		"indefinite map": {0xbf, 0x01, 0x01, 0xff},
		"duplicate key":  {0xa2, 0x01, 0x01, 0x01, 0x02},
		"tag":            {0xc1, 0x01},
		"wrong type":     {0xa1, 0x02, 0x01},
	} {
		if err := Unmarshal(b, &r); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}
}

func mustMarshal(v any) []byte {
	b, err := Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
