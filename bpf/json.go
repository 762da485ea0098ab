package bpf

import (
	"time"

	"github.com/rdmatool/rdmatool/internal/jsonw"
)

// EventJSON is an Event as one JSON object, the line `rdmatool trace -j`
// prints for it. Its json tags are the schema: every field is always
// present, in this order. Fields that do not apply to the event's kind hold
// their zero value: QPType is "" unless Kind.HasQP, NewState "" unless the
// modify changed the state (Event.HasState), CurState "" unless the
// provider said its state (Event.HasCurState), Event and EventCode are ""
// and 0 unless Kind.HasIBEvent.
type EventJSON struct {
	Kind            string  `json:"kind"`
	Time            string  `json:"time"` // RFC 3339 UTC, with nanoseconds (time.RFC3339Nano)
	Device          string  `json:"device"`
	DevIndex        uint32  `json:"dev_index"`
	QPN             uint32  `json:"qpn"`
	QPType          string  `json:"qp_type"`
	SRQ             bool    `json:"srq"`
	SRQN            uint32  `json:"srqn"`
	NewState        string  `json:"new_state"`
	CurState        string  `json:"cur_state"`
	Result          int32   `json:"result"`
	PID             uint32  `json:"pid"`
	TID             uint32  `json:"tid"`
	Comm            string  `json:"comm"`
	KernOwner       string  `json:"kern_owner"`
	Event           string  `json:"event"`
	EventCode       uint32  `json:"event_code"`
	Port            uint32  `json:"port"`
	NewName         string  `json:"new_name"`
	Probe           string  `json:"probe"`
	DurationSeconds float64 `json:"duration_seconds"`
}

// HasIBEvent reports whether events of kind k carry an async event type
// (Event.IBEvent): QP events and device events.
func (k Kind) HasIBEvent() bool { return k == KindQPEvent || k == KindDeviceEvent }

// jsonObject returns ev as its JSON object.
func (ev Event) jsonObject() EventJSON {
	f := ev.kindFields()
	return EventJSON{
		Kind: ev.Kind.String(), Time: ev.Time.UTC().Format(time.RFC3339Nano), Device: ev.DevName, DevIndex: ev.DevIndex,
		QPN: ev.QPN, QPType: f.qpType, SRQ: ev.OnSRQ, SRQN: ev.SRQN, NewState: f.newState, CurState: f.curState, Result: ev.Result,
		PID: ev.PID, TID: ev.TID, Comm: ev.Comm, KernOwner: ev.KernOwner, Event: f.event, EventCode: f.eventCode,
		Port: ev.Port, NewName: ev.NewName, Probe: ev.Probe, DurationSeconds: ev.Duration.Seconds(),
	}
}

// kindFields are the EventJSON fields that hold their zero value on some
// kinds.
type kindFields struct {
	qpType, newState, curState, event string
	eventCode                         uint32
}

func (ev Event) kindFields() kindFields {
	var f kindFields
	if ev.Kind.HasQP() {
		f.qpType = ev.QPType.String()
	}
	if ev.HasState {
		f.newState = ev.NewState.String()
	}
	if ev.HasCurState {
		f.curState = ev.CurState.String()
	}
	if ev.Kind.HasIBEvent() {
		f.event, f.eventCode = ev.IBEvent.String(), uint32(ev.IBEvent)
	}
	return f
}

// AppendJSON appends ev as encoding/json marshals ev.jsonObject(), byte for byte,
// through jsonw, without reflection or allocation (a trace under churn
// prints thousands of events a second).
func (ev Event) AppendJSON(b []byte) []byte {
	f := ev.kindFields()
	b = jsonw.AppendString(append(b, `{"kind":`...), ev.Kind.String())
	b = append(ev.AppendTime(append(b, `,"time":"`...)), '"')
	b = jsonw.AppendString(append(b, `,"device":`...), ev.DevName)
	b = jsonw.AppendUint(append(b, `,"dev_index":`...), ev.DevIndex)
	b = jsonw.AppendUint(append(b, `,"qpn":`...), ev.QPN)
	b = jsonw.AppendString(append(b, `,"qp_type":`...), f.qpType)
	b = jsonw.AppendBool(append(b, `,"srq":`...), ev.OnSRQ)
	b = jsonw.AppendUint(append(b, `,"srqn":`...), ev.SRQN)
	b = jsonw.AppendString(append(b, `,"new_state":`...), f.newState)
	b = jsonw.AppendString(append(b, `,"cur_state":`...), f.curState)
	b = jsonw.AppendInt(append(b, `,"result":`...), ev.Result)
	b = jsonw.AppendUint(append(b, `,"pid":`...), ev.PID)
	b = jsonw.AppendUint(append(b, `,"tid":`...), ev.TID)
	b = jsonw.AppendString(append(b, `,"comm":`...), ev.Comm)
	b = jsonw.AppendString(append(b, `,"kern_owner":`...), ev.KernOwner)
	b = jsonw.AppendString(append(b, `,"event":`...), f.event)
	b = jsonw.AppendUint(append(b, `,"event_code":`...), f.eventCode)
	b = jsonw.AppendUint(append(b, `,"port":`...), ev.Port)
	b = jsonw.AppendString(append(b, `,"new_name":`...), ev.NewName)
	b = jsonw.AppendString(append(b, `,"probe":`...), ev.Probe)
	b = jsonw.AppendFloat(append(b, `,"duration_seconds":`...), ev.Duration.Seconds())
	return append(b, '}')
}

// AppendTime appends ev.Time in UTC as time.RFC3339Nano formats it (the
// JSON's time field), without the general layout parsing of
// time.AppendFormat.
func (ev Event) AppendTime(b []byte) []byte {
	t := ev.Time.UTC()
	year, month, day := t.Date()
	hour, minute, sec := t.Clock()
	if year < 0 || year > 9999 {
		return t.AppendFormat(b, time.RFC3339Nano)
	}
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, minute, 2)
	b = append(b, ':')
	b = appendDigits(b, sec, 2)
	if ns := t.Nanosecond(); ns != 0 {
		digits := 9
		for ns%10 == 0 {
			ns /= 10
			digits--
		}
		b = append(b, '.')
		b = appendDigits(b, ns, digits)
	}
	return append(b, 'Z')
}

// appendDigits appends v, 0 <= v < 10^width, zero-padded to width digits.
func appendDigits(b []byte, v, width int) []byte {
	var d [9]byte
	for i := width - 1; i >= 0; i-- {
		d[i] = byte('0' + v%10)
		v /= 10
	}
	return append(b, d[:width]...)
}
