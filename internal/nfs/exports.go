package nfs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"sync"

	gonfs "github.com/willscott/go-nfs"
)

// MOUNT's EXPORT procedure, which go-nfs does not serve and libnfs asks
// after every mount (it gives up on an error).
const mountProcExport = 5

var exportOnce sync.Once

func registerExport() {
	exportOnce.Do(func() {
		register(progMount, mountProcExport, func(h handler) []byte { return h.s.exportList() })
		for proc, reply := range notServedReplies {
			register(progNFS, notServedBase+proc, func(handler) []byte { return reply })
		}
	})
}

// register makes go-nfs answer proc of prog with the bytes fn gives
// (after the RPC header of a success). go-nfs's handlers take a type it
// does not export, so the handler is made with reflect; it only calls
// the response's exported Write.
func register(prog, proc uint32, fn func(h handler) []byte) {
	t := reflect.TypeOf(gonfs.HandleFunc(nil))
	f := reflect.MakeFunc(t, func(args []reflect.Value) []reflect.Value {
		var err error
		h, ok := args[2].Interface().(handler)
		if !ok {
			err = errors.New("not pando's handler")
		} else {
			out := args[1].MethodByName("Write").Call([]reflect.Value{reflect.ValueOf(fn(h))})
			if e, _ := out[0].Interface().(error); e != nil {
				err = e
			}
		}
		ev := reflect.New(t.Out(0)).Elem()
		if err != nil {
			ev.Set(reflect.ValueOf(err))
		}
		return []reflect.Value{ev}
	})
	_ = gonfs.RegisterMessageHandler(prog, proc, f.Interface().(gonfs.HandleFunc))
}

// NFS procedures the gateway does not serve, and go-nfs would misread
// (its LINK reads a SYMLINK's arguments) or answer with another error:
// the guard hands them to go-nfs under a procedure number of their own
// (notServedBase + proc), which answers NFS3ERR_NOTSUPP with the reply's
// empty attributes, as RFC 1813 lays each out.
const (
	notServedBase  = 1 << 20
	nfs3ErrNotSupp = 10004
)

var notServedReplies = map[uint32][]byte{
	11: xdrWords(nfs3ErrNotSupp, 0, 0),    // MKNOD: wcc_data of the directory
	15: xdrWords(nfs3ErrNotSupp, 0, 0, 0), // LINK: post_op_attr of the file, wcc_data of the directory
}

func xdrWords(ws ...uint32) []byte {
	b := make([]byte, 0, 4*len(ws))
	for _, w := range ws {
		b = binary.BigEndian.AppendUint32(b, w)
	}
	return b
}

// notServed gives a call of an NFS procedure not served (b is the call,
// its header checked) the procedure number that answers it.
func notServed(b []byte) {
	prog, vers, proc := binary.BigEndian.Uint32(b[12:]), binary.BigEndian.Uint32(b[16:]), binary.BigEndian.Uint32(b[20:])
	if _, ok := notServedReplies[proc]; ok && prog == progNFS && vers == 3 {
		binary.BigEndian.PutUint32(b[20:], notServedBase+proc)
	}
}

// exportList is the XDR of the exports and the networks they are served
// to (exports: a list of exportnode, each with its groups).
func (s *Server) exportList() []byte {
	var b bytes.Buffer
	str := func(v string) {
		binary.Write(&b, binary.BigEndian, uint32(len(v)))
		b.WriteString(v)
		for b.Len()%4 != 0 {
			b.WriteByte(0)
		}
	}
	for _, ex := range s.Exports() {
		binary.Write(&b, binary.BigEndian, uint32(1))
		str(ex.Path)
		for _, p := range s.allow {
			binary.Write(&b, binary.BigEndian, uint32(1))
			str(p.String())
		}
		binary.Write(&b, binary.BigEndian, uint32(0))
	}
	binary.Write(&b, binary.BigEndian, uint32(0))
	return b.Bytes()
}
