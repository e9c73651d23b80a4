#!/usr/bin/env python3
"""Import floors: the longest chain of imports (`crate::` paths) between the
modules of a checkout's src/, each module as LAYERS in src/lib.rs names it
(`layers`, the default), or as its top-level module (`top`, for trees before
LAYERS named paths). Prints the number of modules and the longest chain, or
the cycle found. `check` prints the graph of LAYERS' names (each with the
layer it is on, and what it imports) and fails on a cycle or on an import
that is not downward in LAYERS, as tests/rules/layers.rs does. `folders`
lists every import between top-level folders (with the files that make
it), each marked `against` when LAYERS puts the folder it imports at or
above the importer (a folder is on its own name's layer), then every cycle
between folders, not just the first one found.

Usage: python3 tools/import_floors.py [ROOT] [layers|top|check|folders]"""
import os, re, sys
root = sys.argv[1] if len(sys.argv) > 1 else '.'
mode = sys.argv[2] if len(sys.argv) > 2 else 'layers'
src=os.path.join(root,'src')
lib=open(os.path.join(src,'lib.rs')).read()
names=re.findall(r'"([a-z_:]+)"', lib[lib.index('pub const LAYERS'):]) if mode in ('layers','check','folders') else None
def owner(path):
    if mode in ('top','folders'): return path.split('::')[0]
    best=None
    for n in names:
        if path==n or path.startswith(n+'::'):
            if best is None or len(n)>len(best): best=n
    return best
def paths(text):
    out=set()
    for m in re.finditer(r'crate::', text):
        rest=text[m.end():]
        if rest.startswith('{'):
            depth=0; item=''; 
            for c in rest[1:]:
                if c=='{': depth+=1
                elif c=='}':
                    if depth==0: break
                    depth-=1
                if c==',' and depth==0:
                    out.add(re.match(r'\s*([\w:]*)',item).group(1).rstrip(':')); item=''; continue
                item+=c
            out.add(re.match(r'\s*([\w:]*)',item).group(1).rstrip(':'))
        else:
            mm=re.match(r'([a-z_][\w]*(?:::[a-z_][\w]*)*)', rest)
            if mm: out.add(mm.group(1))
    return {p for p in out if p and p!='self'}
edges={}
# (folder, folder it imports) -> the files and paths that make the import
why={}
for d,_,fs in os.walk(src):
    for f in fs:
        if not f.endswith('.rs'): continue
        rel=os.path.relpath(os.path.join(d,f),src)[:-3].split('/')
        if rel[-1]=='mod': rel=rel[:-1]
        if rel in (['lib'],['main']): continue
        mod='::'.join(rel); me=owner(mod)
        text='\n'.join(l for l in open(os.path.join(d,f)) if not l.strip().startswith('//'))
        for p in paths(text):
            o=owner(p)
            if o and me and o!=me:
                edges.setdefault(me,set()).add(o)
                why.setdefault((me,o),set()).add(f"{'/'.join(rel)} -> {p}")
def layer_table():
    body=lib[lib.index('pub const LAYERS'):]
    body=body[body.index('= &[')+4:]
    body=body[:body.index('\n];')]
    layer_of={}
    for at,line in enumerate(re.findall(r'&\[([^\]]*)\]', body)):
        for n in re.findall(r'"([a-z_:]+)"', line): layer_of[n]=at
    return layer_of
if mode=='folders':
    layer_of=layer_table()
    against=0
    for (a,b) in sorted(why):
        bad=layer_of.get(b,-1)>=layer_of.get(a,99)
        against+=bad
        print(f"{a} -> {b}{'   against LAYERS' if bad else ''}")
        for w in sorted(why[(a,b)]): print('    '+w)
    # Every elementary cycle, each found once from its smallest folder.
    cycles=[]
    def walk(start, n, path):
        for m in sorted(edges.get(n, ())):
            if m==start: cycles.append(path+[start])
            elif m>start and m not in path: walk(start, m, path+[m])
    for n in sorted(edges): walk(n, n, [n])
    print(f'{len(why)} imports between folders, {against} against LAYERS;', len(cycles), 'cycles')
    for c in cycles: print('cycle: ' + ' -> '.join(c))
    raise SystemExit(0)
if mode=='check':
    layer_of=layer_table()
    wrong=[]
    for me in sorted(layer_of, key=lambda n:(-layer_of[n], n)):
        uses=sorted(edges.get(me,()), key=lambda n:(-layer_of.get(n,-1), n))
        print(f"{layer_of[me]:2} {me:<22} -> {', '.join(uses) or '-'}")
        wrong += [f'{me} (layer {layer_of[me]}) imports {u} (layer {layer_of.get(u)})' for u in uses if layer_of.get(u,99)>=layer_of[me]]
    if wrong: raise SystemExit('not downward in LAYERS:\n' + '\n'.join(wrong))
memo, active = {}, []
def depth(n):
    if n in memo: return memo[n]
    if n in active: raise SystemExit('cycle: ' + ' -> '.join(active[active.index(n):] + [n]))
    active.append(n)
    memo[n] = 1 + max((depth(m) for m in edges.get(n, ())), default=0)
    active.pop()
    return memo[n]
nodes = set(edges) | {m for v in edges.values() for m in v}
print('modules', len(nodes), 'longest import chain (floors):', max(depth(n) for n in nodes))
