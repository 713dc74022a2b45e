/* SPDX-License-Identifier: Apache-2.0 */
/*
 * list: an intrusive, circular, doubly linked list (the Linux kernel's
 * list_head, cut down to what stagefs uses).
 *
 * The caller embeds a struct list_node in its own struct and keeps one more
 * as the list's head (a sentinel: an empty list is a head pointing at
 * itself).  list_entry() gets from a node back to the struct around it.
 * Nothing is allocated; every operation is O(1).
 *
 * Contract:
 *  - list_init() a head before use (LIST_INIT for a static one); a node
 *    needs no init before list_add().
 *  - list_del() leaves the node's pointers NULL, so list_linked() tells
 *    whether a node is on some list (a node that was never added must be
 *    zeroed, as calloc leaves it, for list_linked() to say false).
 *  - Deleting the node a loop stands on is safe only if the loop took the
 *    next one first (list_for_each_safe()).
 *  - No locking here: whoever owns the list says which lock guards it and
 *    holds that lock around every call that reads or changes it.
 */
#ifndef STAGEFS_LIST_H
#define STAGEFS_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct list_node {
	struct list_node *prev, *next;
};

/* A head defined empty, for a static one: static struct list_node h = LIST_INIT(h); */
#define LIST_INIT(name)	{ &(name), &(name) }

/* The struct of type @type whose member @member is at @ptr. */
#define list_entry(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

static inline void list_init(struct list_node *head)
{
	head->prev = head->next = head;
}

static inline bool list_empty(const struct list_node *head)
{
	return head->next == head;
}

/* Is @n on a list?  (See the contract: false after list_del().) */
static inline bool list_linked(const struct list_node *n)
{
	return n->next != NULL;
}

static inline void list_insert_(struct list_node *n, struct list_node *prev,
				struct list_node *next)
{
	n->next = next;
	n->prev = prev;
	next->prev = n;
	prev->next = n;
}

/* Add @n at the front of @head (most recent first, for an LRU). */
static inline void list_add(struct list_node *head, struct list_node *n)
{
	list_insert_(n, head, head->next);
}

/* Add @n at the back of @head. */
static inline void list_add_tail(struct list_node *head, struct list_node *n)
{
	list_insert_(n, head->prev, head);
}

/* Take @n off its list; its pointers are NULL after. */
static inline void list_del(struct list_node *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->prev = n->next = NULL;
}

/* Move @n (on a list) to the front of @head. */
static inline void list_move(struct list_node *head, struct list_node *n)
{
	if (head->next == n)
		return;
	list_del(n);
	list_add(head, n);
}

/*
 * Move every node of @from to the back of @head, in order; @from is left
 * empty.  (To take a list handed over under a lock and walk it after.)
 */
static inline void list_splice_tail(struct list_node *head, struct list_node *from)
{
	if (list_empty(from))
		return;
	from->next->prev = head->prev;
	head->prev->next = from->next;
	from->prev->next = head;
	head->prev = from->prev;
	list_init(from);
}

/* First / last node of @head, or NULL when it is empty. */
static inline struct list_node *list_first(const struct list_node *head)
{
	return list_empty(head) ? NULL : head->next;
}

static inline struct list_node *list_last(const struct list_node *head)
{
	return list_empty(head) ? NULL : head->prev;
}

/* Take the first node off @head and return it, or NULL when it is empty. */
static inline struct list_node *list_pop(struct list_node *head)
{
	struct list_node *n = list_first(head);

	if (n)
		list_del(n);
	return n;
}

/* Walk @head front to back (list_for_each) or back to front (_reverse). */
#define list_for_each(pos, head) \
	for (struct list_node *pos = (head)->next; pos != (head); pos = pos->next)
#define list_for_each_reverse(pos, head) \
	for (struct list_node *pos = (head)->prev; pos != (head); pos = pos->prev)
/* The same, where the loop may list_del() @pos. */
#define list_for_each_safe(pos, tmp, head) \
	for (struct list_node *pos = (head)->next, *tmp = pos->next; \
	     pos != (head); pos = tmp, tmp = pos->next)
#define list_for_each_reverse_safe(pos, tmp, head) \
	for (struct list_node *pos = (head)->prev, *tmp = pos->prev; \
	     pos != (head); pos = tmp, tmp = pos->prev)

#endif
