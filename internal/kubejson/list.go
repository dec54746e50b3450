package kubejson

import (
	"errors"
	"fmt"

	"github.com/informerhub/informerhub/internal/jsonscan"
)

// List is a LIST response read in place.
type List struct {
	APIVersion, Kind string
	// Metadata holds the list's metadata members, as JSON, in order (there
	// is one; encoding/json merges duplicates); nulls are left out.
	Metadata [][]byte
	Items    []Item
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
	var (
		itemsErr error // of the items that stand, if one is of the wrong shape
		typeErr  error // of the list itself: encoding/json fails it at its end
	)
	i := jsonscan.SkipSpace(b, 0)
	if jsonscan.IsNull(b, i) {
		i += 4
	} else {
		var err error
		i, err = jsonscan.CheckMembers(b, i, func(m *jsonscan.Member) (int, error) {
			switch {
			case m.KeyIs("apiVersion"):
				return readString(b, m, 1, &l.APIVersion)
			case m.KeyIs("kind"):
				return readString(b, m, 1, &l.Kind)
			case m.KeyIs("metadata"):
				end, err := jsonscan.CheckValueIn(b, m.Start, 1)
				if err == nil && !jsonscan.IsNull(b, m.Start) {
					l.Metadata = append(l.Metadata, b[m.Start:end])
				}
				return end, err
			case m.KeyIs("items"):
				if b[m.Start] != '[' && !jsonscan.IsNull(b, m.Start) {
					end, err := jsonscan.CheckValueIn(b, m.Start, 1)
					if err == nil && typeErr == nil {
						typeErr = fmt.Errorf("%w: items must be an array", ErrWrongType)
					}
					return end, err
				}
				return readItems(b, m, l, &itemsErr)
			}
			return jsonscan.CheckValueIn(b, m.Start, 1)
		})
		if err != nil {
			return err
		}
	}
	if jsonscan.SkipSpace(b, i) != len(b) {
		return fmt.Errorf("%w: data after the list", jsonscan.ErrBadJSON)
	}
	if typeErr != nil {
		return typeErr
	}
	return itemsErr
}

// readItems reads a list's items member, an array or null, into l.Items,
// replacing what an earlier one held, as encoding/json does. An item of the
// wrong shape is an error (in *itemsErr) only if no later items member
// replaces it: the items are read as raw JSON first, as a RawExtension.
func readItems(b []byte, m *jsonscan.Member, l *List, itemsErr *error) (int, error) {
	if jsonscan.IsNull(b, m.Start) {
		l.Items, *itemsErr = nil, nil
		return m.Start + 4, nil
	}
	items := l.Items[:0]
	var wrong error
	end, err := jsonscan.CheckElements(b, m.Start, func(start int) (int, error) {
		var item Item
		end, err := decodeHeader(b, start, 2, &item.Header)
		if errors.Is(err, ErrWrongType) {
			// Its syntax decides whether the list is whole.
			wrong = err
			return jsonscan.CheckValueIn(b, start, 2)
		}
		if err != nil {
			return 0, err
		}
		item.Data = b[start:end]
		items = append(items, item)
		return end, nil
	})
	if err != nil {
		return 0, err
	}
	l.Items, *itemsErr = items, wrong
	return end, nil
}
