package kubejson

import (
	"fmt"

	"github.com/informerhub/informerhub/internal/jsonscan"
)

// List is a LIST response read in place.
type List struct {
	APIVersion, Kind string
	Metadata         []byte // the list's metadata, as JSON; nil if none
	Items            []Item
}

// Item is one item of a List: its bytes (a part of the response) and its
// header.
type Item struct {
	Data   []byte
	Header Header
}

// DecodeList reads the LIST response b into l in one pass, checking its
// syntax as encoding/json does.
func DecodeList(b []byte, l *List) error {
	*l = List{}
	i := jsonscan.SkipSpace(b, 0)
	if jsonscan.IsNull(b, i) {
		i += 4
	} else {
		var err error
		i, err = jsonscan.CheckMembers(b, i, func(m *jsonscan.Member) (int, error) {
			switch {
			case m.KeyIs("apiVersion"):
				return readString(b, m, &l.APIVersion)
			case m.KeyIs("kind"):
				return readString(b, m, &l.Kind)
			case m.KeyIs("metadata"):
				end, err := jsonscan.CheckValue(b, m.Start)
				if err == nil && !jsonscan.IsNull(b, m.Start) {
					l.Metadata = b[m.Start:end]
				}
				return end, err
			case m.KeyIs("items"):
				if jsonscan.IsNull(b, m.Start) {
					l.Items = nil
					return m.Start + 4, nil
				}
				if b[m.Start] != '[' {
					if _, err := jsonscan.CheckValue(b, m.Start); err != nil {
						return 0, err
					}
					return 0, fmt.Errorf("%w: items must be an array", ErrWrongType)
				}
				l.Items = l.Items[:0]
				return jsonscan.CheckElements(b, m.Start, func(start int) (int, error) {
					var item Item
					end, err := DecodeHeader(b, start, &item.Header)
					if err != nil {
						return 0, err
					}
					item.Data = b[start:end]
					l.Items = append(l.Items, item)
					return end, nil
				})
			}
			return jsonscan.CheckValue(b, m.Start)
		})
		if err != nil {
			return err
		}
	}
	if jsonscan.SkipSpace(b, i) != len(b) {
		return fmt.Errorf("%w: data after the list", jsonscan.ErrBadJSON)
	}
	return nil
}
