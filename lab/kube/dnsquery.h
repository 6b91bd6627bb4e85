/*
 * dnsquery.h: the DNS query the lab's static clients (dnsload.c, dnswatch.c)
 * send: header with RD, one question of class IN. Included by both, so the
 * encoding is written once.
 */
#ifndef DNSQUERY_H
#define DNSQUERY_H

#include <stdint.h>
#include <string.h>

/* Writes a query for `name` (dotted, no trailing dot needed) of `type` into
 * buf (at least 300 bytes) and returns its length. Labels past 63 octets, an
 * empty label or a name past 300 bytes end the name there. */
static size_t encode_query(uint8_t *buf, uint16_t id, const char *name, uint16_t type)
{
	size_t n = 0;
	buf[n++] = id >> 8;
	buf[n++] = id & 0xff;
	buf[n++] = 0x01; /* RD */
	buf[n++] = 0x00;
	buf[n++] = 0; buf[n++] = 1; /* QDCOUNT */
	memset(buf + n, 0, 6);
	n += 6;
	const char *p = name;
	while (*p && n < 300) {
		const char *dot = strchr(p, '.');
		size_t len = dot ? (size_t)(dot - p) : strlen(p);
		if (len == 0 || len > 63)
			break;
		buf[n++] = len;
		memcpy(buf + n, p, len);
		n += len;
		p += len;
		if (*p == '.')
			p++;
	}
	buf[n++] = 0;
	buf[n++] = type >> 8; buf[n++] = type & 0xff;
	buf[n++] = 0; buf[n++] = 1; /* IN */
	return n;
}

#endif
