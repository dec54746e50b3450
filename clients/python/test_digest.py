"""Tests of informerhub_client's Digest on the vectors of the hub's own
tests (informerhub/digest, computed with hashlib), and as it applies
events. They need no hub, only the stubs (generate.sh); test_client.py
compares with a real hub's Digest."""

from __future__ import annotations

import unittest

from informerhub_client import Digest, Event, EventType, HubDigest, object_hash


def cm(namespace: str, name: str, uid: str, resource_version: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": namespace, "name": name, "uid": uid, "resourceVersion": resource_version}}


def event(type_: EventType, obj: dict) -> Event:
    return Event(type_, obj, obj["metadata"]["resourceVersion"], "token")


A = cm("demo", "a", "u1", "1")
B = cm("demo", "b", "u2", "2")
D = cm("demo", "d", "u2", "2")


class DigestTest(unittest.TestCase):
    def test_an_objects_digest_is_the_first_16_bytes_of_the_sha256_of_its_identity(self):
        self.assertEqual(str(Digest([A])), "9d3c49e85ad4e083f7e2adddf824b91d")
        self.assertEqual(str(Digest([B])), "07db7b80ee30f5e92fe749f5890a3ba9")
        self.assertEqual(str(Digest([D])), "acc4e64ed49441c2b374a86ea0f0f7cb")
        self.assertEqual(object_hash(A), 0x9d3c49e85ad4e083f7e2adddf824b91d)

    def test_a_sets_digest_is_the_sum_of_its_objects_modulo_2_to_128_in_any_order(self):
        # A + B carries out of the low 64 bits; A + D wraps past 2**128.
        self.assertEqual(str(Digest([A, B])), "a517c5694905d66d27c9f7d3812ef4c6")
        self.assertEqual(str(Digest([B, A])), "a517c5694905d66d27c9f7d3812ef4c6")
        self.assertEqual(str(Digest([A, D])), "4a0130372f692246ab57564c9915b0e8")
        self.assertEqual(str(Digest([A, D]).remove(A)), "acc4e64ed49441c2b374a86ea0f0f7cb")
        self.assertEqual(Digest([A, B]).count, 2)

    def test_the_empty_sets_digest_is_32_zeros_and_removing_what_was_added_comes_back_to_it(self):
        self.assertEqual(str(Digest()), "0" * 32)
        digest = Digest([A, B, D]).remove(D).remove(A).remove(B)
        self.assertEqual((str(digest), digest.count), ("0" * 32, 0))

    def test_a_cluster_scoped_object_hashes_with_namespace_empty_and_fields_cannot_run_into_each_other(self):
        node = {"metadata": {"name": "n1", "uid": "u", "resourceVersion": "5"}}
        self.assertEqual(object_hash(node), object_hash(cm("", "n1", "u", "5")))
        self.assertNotEqual(object_hash(cm("demo", "ab", "u", "1")), object_hash(cm("demo", "a", "bu", "1")))

    def test_apply_keeps_the_digest_of_what_a_watchs_events_leave_subtracting_the_state_held(self):
        held = {}  # name -> object, as a consumer holds them
        digest = Digest()

        def apply(e: Event):
            name = e.object["metadata"]["name"]
            digest.apply(e, held.get(name))
            if e.type is EventType.DELETED:
                del held[name]
            else:
                held[name] = e.object

        apply(event(EventType.ADDED, A))
        apply(event(EventType.ADDED, B))
        self.assertEqual(str(digest), "a517c5694905d66d27c9f7d3812ef4c6")
        b2 = cm("demo", "b", "u2", "3")
        apply(event(EventType.MODIFIED, b2))
        self.assertEqual(str(digest), str(Digest([A, b2])))
        digest.apply(Event(EventType.BOOKMARK, None, "3", "token"))
        # A DELETED carries the deletion's resourceVersion: what is
        # subtracted is the state held (a at 1), not the event's object (a at 4).
        apply(event(EventType.DELETED, cm("demo", "a", "u1", "4")))
        self.assertEqual((str(digest), digest.count), (str(Digest([b2])), 1))
        self.assertTrue(digest.matches(HubDigest(1, str(Digest([b2])), "4", "token", False)))
        self.assertFalse(digest.matches(HubDigest(2, str(Digest([b2])), "4", "token", False)), "a different count")
        self.assertFalse(digest.matches(HubDigest(1, str(Digest([B])), "4", "token", False)), "a different digest")

    def test_an_added_of_an_object_held_replaces_it_and_a_change_without_the_state_held_raises(self):
        # A re-sync lists as ADDED what the consumer may hold.
        a2 = cm("demo", "a", "u1", "7")
        self.assertEqual(str(Digest([A, B]).apply(event(EventType.ADDED, a2), A)), str(Digest([a2, B])))
        with self.assertRaisesRegex(ValueError, "a MODIFIED of 'a' needs the state held before it"):
            Digest().apply(event(EventType.MODIFIED, A))
        with self.assertRaisesRegex(ValueError, "a DELETED of 'a' needs the state held before it"):
            Digest([A]).apply(event(EventType.DELETED, A))
        with self.assertRaisesRegex(TypeError, "needs metadata.name, uid and resourceVersion"):
            Digest().add({"metadata": {"name": "x", "resourceVersion": "1"}})


if __name__ == "__main__":
    unittest.main()
