package wire

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"reflect"
	"testing"
)

// messages names the meta of every op: the request's and the reply's (for
// OpWatch, the Notify frames'). A new op must be added here, or
// TestEveryOpIsFuzzed fails: its messages are then fuzzed with the rest.
var messages = map[Op]struct{ req, resp func() any }{
	OpAuth:        {func() any { return &AuthReq{} }, func() any { return &AuthResp{} }},
	OpStage:       {func() any { return &HandleReq{} }, func() any { return &OpenResp{} }},
	OpCommit:      {func() any { return &CommitReq{} }, func() any { return &AttrResp{} }},
	OpGetAttr:     {func() any { return &PathReq{} }, func() any { return &AttrResp{} }},
	OpReadDir:     {func() any { return &ReadDirReq{} }, func() any { return &ReadDirResp{} }},
	OpOpen:        {func() any { return &OpenReq{} }, func() any { return &OpenResp{} }},
	OpCreate:      {func() any { return &OpenReq{} }, func() any { return &OpenResp{} }},
	OpRead:        {func() any { return &ReadReq{} }, func() any { return &ReadResp{} }},
	OpWrite:       {func() any { return &WriteReq{} }, func() any { return &WriteResp{} }},
	OpClose:       {func() any { return &HandleReq{} }, func() any { return &Empty{} }},
	OpTruncate:    {func() any { return &TruncateReq{} }, func() any { return &AttrResp{} }},
	OpRename:      {func() any { return &RenameReq{} }, func() any { return &Empty{} }},
	OpUnlink:      {func() any { return &PathReq{} }, func() any { return &Empty{} }},
	OpMkdir:       {func() any { return &MkdirReq{} }, func() any { return &AttrResp{} }},
	OpMknod:       {func() any { return &MknodReq{} }, func() any { return &AttrResp{} }},
	OpRmdir:       {func() any { return &PathReq{} }, func() any { return &Empty{} }},
	OpSymlink:     {func() any { return &SymlinkReq{} }, func() any { return &AttrResp{} }},
	OpReadlink:    {func() any { return &PathReq{} }, func() any { return &ReadlinkResp{} }},
	OpLink:        {func() any { return &RenameReq{} }, func() any { return &AttrResp{} }},
	OpSetAttr:     {func() any { return &SetAttrReq{} }, func() any { return &AttrResp{} }},
	OpFsync:       {func() any { return &HandleReq{} }, func() any { return &Empty{} }},
	OpStatFS:      {func() any { return &PathReq{} }, func() any { return &StatFSResp{} }},
	OpPing:        {func() any { return &Empty{} }, func() any { return &Empty{} }},
	OpFGetAttr:    {func() any { return &HandleReq{} }, func() any { return &AttrResp{} }},
	OpGetXattr:    {func() any { return &XattrReq{} }, func() any { return &XattrResp{} }},
	OpListXattr:   {func() any { return &PathReq{} }, func() any { return &ListXattrResp{} }},
	OpSetXattr:    {func() any { return &SetXattrReq{} }, func() any { return &AttrResp{} }},
	OpRemoveXattr: {func() any { return &XattrReq{} }, func() any { return &AttrResp{} }},
	OpLock:        {func() any { return &LockReq{} }, func() any { return &LockResp{} }},

	OpSum:     {func() any { return &SumReq{} }, func() any { return &SumResp{} }},
	OpGetFile: {func() any { return &GetFileReq{} }, func() any { return &GetFileResp{} }},
	OpPutFile: {func() any { return &PutFileReq{} }, func() any { return &AttrResp{} }},
	OpPush:    {func() any { return &PushReq{} }, func() any { return &PushResp{} }},
	OpTicket:  {func() any { return &TicketReq{} }, func() any { return &TicketResp{} }},

	OpGetInv:      {func() any { return &GetInvReq{} }, func() any { return &GetInvResp{} }},
	OpDelegReturn: {func() any { return &DelegReturnReq{} }, func() any { return &Empty{} }},
	OpValidate:    {func() any { return &ValidateReq{} }, func() any { return &ValidateResp{} }},

	OpResolve:        {func() any { return &ResolveReq{} }, func() any { return &ResolveResp{} }},
	OpMountList:      {func() any { return &Empty{} }, func() any { return &MountListResp{} }},
	OpMountAdd:       {func() any { return &MountEntry{} }, func() any { return &Empty{} }},
	OpMountRemove:    {func() any { return &PathReq{} }, func() any { return &Empty{} }},
	OpShareRegister:  {func() any { return &ShareRegisterReq{} }, func() any { return &ShareRegisterResp{} }},
	OpShareList:      {func() any { return &Empty{} }, func() any { return &ShareListResp{} }},
	OpUserAdd:        {func() any { return &UserAddReq{} }, func() any { return &UserAddResp{} }},
	OpUserList:       {func() any { return &Empty{} }, func() any { return &UserListResp{} }},
	OpUserRevoke:     {func() any { return &UserRevokeReq{} }, func() any { return &Empty{} }},
	OpACLGet:         {func() any { return &ACLGetReq{} }, func() any { return &ACLResp{} }},
	OpACLSet:         {func() any { return &ACLSetReq{} }, func() any { return &Empty{} }},
	OpWatch:          {func() any { return &Empty{} }, func() any { return &Revocation{} }},
	OpWhoAmI:         {func() any { return &Empty{} }, func() any { return &WhoAmIResp{} }},
	OpStatus:         {func() any { return &Empty{} }, func() any { return &StatusResp{} }},
	OpMountWatch:     {func() any { return &Empty{} }, func() any { return &MountListResp{} }},
	OpTokenCreate:    {func() any { return &TokenCreateReq{} }, func() any { return &TokenCreateResp{} }},
	OpTokenCheck:     {func() any { return &TokenCheckReq{} }, func() any { return &TokenCheckResp{} }},
	OpUserPasswd:     {func() any { return &UserPasswdReq{} }, func() any { return &Empty{} }},
	OpPasswordCheck:  {func() any { return &UserPasswdReq{} }, func() any { return &Empty{} }},
	OpS3KeyCreate:    {func() any { return &S3KeyReq{} }, func() any { return &S3KeyResp{} }},
	OpS3KeyGet:       {func() any { return &S3KeyReq{} }, func() any { return &S3KeyResp{} }},
	OpDomainLink:     {func() any { return &DomainLinkReq{} }, func() any { return &DomainLink{} }},
	OpDomainUnlink:   {func() any { return &DomainNameReq{} }, func() any { return &Empty{} }},
	OpDomainList:     {func() any { return &DomainListReq{} }, func() any { return &DomainListResp{} }},
	OpDomainHello:    {func() any { return &Empty{} }, func() any { return &DomainHello{} }},
	OpDomainInvite:   {func() any { return &DomainInviteReq{} }, func() any { return &DomainInviteResp{} }},
	OpDomainJoin:     {func() any { return &DomainJoinReq{} }, func() any { return &DomainHello{} }},
	OpDomainAssert:   {func() any { return &DomainAssertReq{} }, func() any { return &DomainAssertResp{} }},
	OpCertRenew:      {func() any { return &CertRenewReq{} }, func() any { return &CertRenewResp{} }},
	OpBearerCheck:    {func() any { return &BearerCheckReq{} }, func() any { return &BearerCheckResp{} }},
	OpIssuerTrust:    {func() any { return &IssuerInfo{} }, func() any { return &Empty{} }},
	OpIssuerList:     {func() any { return &Empty{} }, func() any { return &IssuerListResp{} }},
	OpIssuerDistrust: {func() any { return &IssuerDistrustReq{} }, func() any { return &Empty{} }},
	OpDomainJWKS:     {func() any { return &Empty{} }, func() any { return &DomainJWKSResp{} }},
}

func TestEveryOpIsFuzzed(t *testing.T) {
	for op := range opNames {
		if _, ok := messages[op]; !ok {
			t.Errorf("op %s has no entry in the fuzz table `messages`: add its request and reply types", op)
		}
	}
	for op := range messages {
		if _, ok := opNames[op]; !ok {
			t.Errorf("the fuzz table names op %d, which does not exist", op)
		}
	}
}

// metaTypes returns makers of the types a frame's meta may hold: the one
// its type and op call for, or every message type for an unknown op.
func metaTypes(typ byte, op Op) []func() any {
	newError := func() any { return &Error{} }
	if typ == TypeError {
		return []func() any{newError}
	}
	if typ == TypeCancel {
		return nil
	}
	m, ok := messages[op]
	if !ok {
		all := []func() any{newError}
		for _, m := range messages {
			all = append(all, m.req, m.resp)
		}
		return all
	}
	if typ == TypeRequest {
		return []func() any{m.req}
	}
	return []func() any{m.resp}
}

// roundTrip checks that a decoded message encodes, that the encoding
// decodes again, and that encoding is then stable: decode(encode(x))
// encodes to the same bytes as x, so nothing a peer sends is silently
// changed or lost between decode and re-encode.
func roundTrip(t *testing.T, v any, fresh func() any) {
	t.Helper()
	enc1, err := Marshal(v)
	if err != nil {
		t.Fatalf("%T decoded but does not encode: %v", v, err)
	}
	w := fresh()
	if err := Unmarshal(enc1, w); err != nil {
		t.Fatalf("%T: its own encoding does not decode: %v", v, err)
	}
	enc2, err := Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(enc1, enc2) {
		t.Fatalf("%T changed in a round trip:\n%x\n%x", v, enc1, enc2)
	}
}

// FuzzDecodeFrame feeds arbitrary bytes to the frame decoder, then the
// frame's meta to the message type its type and op call for (every type,
// for an unknown op). Nothing may panic; a frame is refused exactly when
// it breaks the format; what is accepted re-encodes to the bytes read;
// and every message that decodes survives a round trip.
func FuzzDecodeFrame(f *testing.F) {
	for _, seed := range [][]byte{
		frameBytes(TypeRequest, OpPing, 1, []byte{0xa0}, nil),
		frameBytes(TypeRequest, OpRead, 2, mustMarshal(ReadReq{Tok: 1, Handle: 9, Offset: 1 << 40, Length: 1 << 20}), nil),
		frameBytes(TypeRequest, OpWrite, 3, mustMarshal(WriteReq{Tok: 1, Handle: 9}), []byte("hello")),
		frameBytes(TypeRequest, OpRename, 4, mustMarshal(RenameReq{Tok: 1, Old: "a/b", New: "../etc"}), nil),
		frameBytes(TypeError, OpGetAttr, 5, mustMarshal(Error{Code: CodeNotExist, Message: "x"}), nil),
		frameBytes(TypeRequest, OpSetXattr, 6, mustMarshal(SetXattrReq{Tok: 1, Path: "a", Name: "user.x", Value: make([]byte, XattrValueMax)}), nil),
		frameBytes(TypeResponse, OpReadDir, 7, mustMarshal(ReadDirResp{Entries: []DirEntry{{Name: "a", Attr: Attr{Size: 3}, Data: true}, {Name: "d", Attr: Attr{Mode: 0o40755}}}}), []byte("abc")),
		frameBytes(TypeRequest, OpACLSet, 8, mustMarshal(ACLSetReq{Path: "/uva/data", Entries: []ACLEntry{{Who: "alice", Rights: "rl"}, {Who: "anyone", Rights: "r", Negative: true}}}), nil),
		frameBytes(TypeResponse, OpGetInv, 9, mustMarshal(GetInvResp{Paths: []string{"a", "b/c"}, Stamp: 7, Recalls: []Recall{{Path: "x", Off: 1, Len: 2}}}), nil),
		frameBytes(TypeNotify, OpWatch, 10, mustMarshal(Revocation{Principal: "alice@uva", Before: 1, Serials: []string{"ab"}}), nil),
		frameBytes(TypeResponse, OpACLGet, 11, mustMarshal(ACLResp{Path: "/uva", Inherited: map[string][]ACLEntry{"/": {{Who: "anyone", Rights: "l"}}}}), nil),
		frameBytes(TypeRequest, OpPush, 12, mustMarshal(PushReq{Tok: 1, Path: "f", Dest: ResolveResp{Prefix: "/b/x", Token: []byte{1}}, DestPath: "/b/x/f"}), nil),
		frameBytes(TypeRequest, OpMountAdd, 13, mustMarshal(MountEntry{Prefix: "/uva/data", Share: "data", More: []Location{{Share: "copy", SharePath: "a/b", Kind: LocReplica}, {Share: "x", Kind: 99}}}), nil),
		frameBytes(TypeResponse, OpMountList, 14, mustMarshal(MountListResp{Domain: "uva", Entries: []MountEntry{{Prefix: "/uva/a", Share: "a", SharePath: "p", More: []Location{{Share: "b", Kind: LocReplica}}}}}), nil),
		frameBytes(TypeCancel, OpRead, 2, nil, nil),
		{0, 0, 0},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := ReadFrame(bytes.NewReader(b))
		h, herr := DecodeHeader(b)
		if err != nil {
			switch {
			case len(b) < HeaderSize:
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("short header: %v", err)
				}
			case herr != nil:
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("bad header refused without ErrMalformed: %v", err)
				}
			case len(b) < HeaderSize+int(h.MetaLen)+int(h.DataLen):
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("truncated frame: %v", err)
				}
			default:
				if !errors.Is(err, ErrChecksum) || h.Flags&FlagCRC == 0 {
					t.Fatalf("a whole frame with a valid header refused: %v", err)
				}
			}
			return
		}
		if herr != nil {
			t.Fatalf("frame accepted with a bad header: %v", herr)
		}
		if fr.MetaLen > MaxMeta || fr.DataLen > MaxData || int(fr.MetaLen) != len(fr.Meta) || int(fr.DataLen) != len(fr.Data) {
			t.Fatalf("lengths disagree or exceed the limits: %+v", fr.Header)
		}
		var re [HeaderSize]byte
		fr.Header.Encode(re[:])
		n := HeaderSize + len(fr.Meta)
		if !bytes.Equal(re[:], b[:HeaderSize]) || !bytes.Equal(fr.Meta, b[HeaderSize:n]) || !bytes.Equal(fr.Data, b[n:n+len(fr.Data)]) {
			t.Fatalf("frame does not re-encode to what was read")
		}
		if fr.Flags&FlagCRC != 0 && CRC(fr.Data) != fr.DataCRC {
			t.Fatalf("data accepted against a wrong CRC")
		}
		for _, fresh := range metaTypes(fr.Type, fr.Op) {
			v := fresh()
			if err := Unmarshal(fr.Meta, v); err != nil {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("decode error without ErrMalformed: %v", err)
				}
				continue
			}
			if e, ok := v.(*Error); ok {
				_ = e.Errno()
				_ = errors.Is(e, fs.ErrNotExist)
			}
			if n := footprint(reflect.ValueOf(v)); n > maxAmplification*len(fr.Meta)+1024 {
				t.Fatalf("%d bytes of meta decode to %T of %d bytes", len(fr.Meta), v, n)
			}
			roundTrip(t, v, fresh)
			oldReadsAsNew(t, fr.Meta, v)
		}
		_ = fr.Op.String()
		_ = fr.Op.Idempotent()
	})
}

// oldReadsAsNew checks that a mount-table entry or table that decodes reads
// the same to an agent that knows one location per entry: its primary.
func oldReadsAsNew(t *testing.T, meta []byte, v any) {
	var olds []mountEntryV1
	var news []MountEntry
	switch v := v.(type) {
	case *MountEntry:
		var o mountEntryV1
		if err := Unmarshal(meta, &o); err != nil {
			t.Fatalf("an entry new agents read is refused by old ones: %v", err)
		}
		olds, news = []mountEntryV1{o}, []MountEntry{*v}
	case *MountListResp:
		var o mountListV1
		if err := Unmarshal(meta, &o); err != nil {
			t.Fatalf("a table new agents read is refused by old ones: %v", err)
		}
		olds, news = o.Entries, v.Entries
	default:
		return
	}
	if len(olds) != len(news) {
		t.Fatalf("old agents read %d entries, new ones %d", len(olds), len(news))
	}
	for i, n := range news {
		if olds[i] != (mountEntryV1{n.Prefix, n.Share, n.SharePath}) {
			t.Fatalf("entry %d: old agents read %+v, new ones %+v", i, olds[i], n)
		}
	}
}

// maxAmplification bounds how many bytes of memory one byte of meta may
// decode to. The worst today is a listing: each empty map (one byte) in
// its entries array is a DirEntry of 88 bytes, so a MaxMeta reply may take
// some 90 MiB to decode. A message type that would decode to more per
// byte (a larger struct in an array) fails FuzzDecodeFrame until its
// bound is thought through.
const maxAmplification = 128

// footprint is the memory that v and what it points to take.
func footprint(v reflect.Value) int {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return 0
		}
		return int(v.Type().Elem().Size()) + footprint(v.Elem())
	case reflect.Struct:
		n := 0
		for i := range v.NumField() {
			n += footprint(v.Field(i))
		}
		return n
	case reflect.Slice:
		n := v.Cap() * int(v.Type().Elem().Size())
		for i := range v.Len() {
			n += footprint(v.Index(i))
		}
		return n
	case reflect.String:
		return v.Len()
	case reflect.Map:
		n := 0
		it := v.MapRange()
		for it.Next() {
			n += int(v.Type().Key().Size()+v.Type().Elem().Size()) + footprint(it.Key()) + footprint(it.Value())
		}
		return n
	}
	return 0
}

// FuzzReadPreface: a preface is accepted only with the magic and this
// version, refused with ErrNotPando or ErrVersion otherwise, and an
// accepted one re-encodes to the bytes read.
func FuzzReadPreface(f *testing.F) {
	f.Add(EncodePreface(Preface{Version: Version, Channel: ChannelControl}))
	f.Add(EncodePreface(Preface{Version: Version, Channel: ChannelDataSafe}))
	f.Add(EncodePreface(Preface{Version: Version + 1, Channel: ChannelData}))
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Add([]byte{0x16, 0x03, 0x01, 0x00, 0xa5})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ReadPreface(bytes.NewReader(b))
		switch {
		case len(b) < PrefaceSize:
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("short preface: %v", err)
			}
		case [4]byte(b[:4]) != Magic:
			if !errors.Is(err, ErrNotPando) {
				t.Fatalf("no magic: %v", err)
			}
		case p.Version != Version:
			if !errors.Is(err, ErrVersion) {
				t.Fatalf("version %d: %v", p.Version, err)
			}
		default:
			if err != nil {
				t.Fatalf("good preface refused: %v", err)
			}
			if re := EncodePreface(p); !bytes.Equal(re[:7], b[:7]) {
				t.Fatalf("preface %x re-encodes as %x", b[:8], re)
			}
		}
	})
}
