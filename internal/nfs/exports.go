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
// after every mount (it gives up on an error). go-nfs's handlers take a
// type it does not export, so the handler is made with reflect; it only
// calls the response's exported Write.
const mountProcExport = 5

var exportOnce sync.Once

func registerExport() {
	exportOnce.Do(func() {
		t := reflect.TypeOf(gonfs.HandleFunc(nil))
		fn := reflect.MakeFunc(t, func(args []reflect.Value) []reflect.Value {
			var err error
			h, ok := args[2].Interface().(handler)
			if !ok {
				err = errors.New("not pando's handler")
			} else {
				out := args[1].MethodByName("Write").Call([]reflect.Value{reflect.ValueOf(h.s.exportList())})
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
		_ = gonfs.RegisterMessageHandler(100005, mountProcExport, fn.Interface().(gonfs.HandleFunc))
	})
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
