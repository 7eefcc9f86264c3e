/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mrc_api_ver.h: API version numbers of the OCP MRC API, as mrc-nic's mrc.h
 * implements it (docs/api.md, "C programs"). A version is major.minor.sub
 * packed into 32 bits; the all-ones value asks for the newest.
 */
#ifndef _MRC_API_VER_H_
#define _MRC_API_VER_H_

#define MRC_API_VER_MAJOR_OFFSET 24
#define MRC_API_VER_MINOR_OFFSET 16

#define MRC_API_VER(_major, _minor, _sub_minor)                                                    \
	(((_major) << MRC_API_VER_MAJOR_OFFSET) | ((_minor) << MRC_API_VER_MINOR_OFFSET) |          \
	 (_sub_minor))

#define MRC_API_VER_LATEST MRC_API_VER(0xFF, 0xFF, 0xFFFF)

#endif /* _MRC_API_VER_H_ */
