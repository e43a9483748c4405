import re,sys
H=sorted(__import__('glob').glob('/usr/src/linux-headers-*-common/include/linux/mlx5/mlx5_ifc.h'))[-1]
import glob
t=open(H).read()+''.join(open(f).read() for f in sorted(glob.glob(H.rsplit('/',1)[0]+'/*.h')) if not f.endswith('mlx5_ifc.h'))
t=re.sub(r'/\*.*?\*/','',t,flags=re.S)
t=re.sub(r'//[^\n]*','',t)
consts={}
for m in re.finditer(r'\b(MLX5_\w+)\s*=\s*(0x[0-9a-fA-F]+|\d+)',t): consts.setdefault(m.group(1),int(m.group(2),0))
for m in re.finditer(r'#define\s+(MLX5_\w+)\s+(0x[0-9a-fA-F]+|\d+)\b',t): consts.setdefault(m.group(1),int(m.group(2),0))
toks=re.findall(r'[A-Za-z_]\w*|0[xX][0-9a-fA-F]+|\d+|[{};\[\]]|\S',t)
defs={}
i=0
def block(i,toks=toks):
    # toks[i]=='{' ; return index after matching '}'
    d=0
    while True:
        if toks[i]=='{': d+=1
        elif toks[i]=='}':
            d-=1
            if d==0: return i+1
        i+=1
while i<len(toks):
    if toks[i] in('struct','union') and toks[i+1].startswith('mlx5_ifc_') and toks[i+2]=='{':
        e=block(i+2); defs[toks[i+1]]=(toks[i],toks[i+3:e-1]); i=e
    else: i+=1
def val(s):
    if s in consts: return consts[s]
    return int(s,0)
def members(kind,tk):
    out=[];off=0;size=0;j=0
    while j<len(tk):
        if tk[j]=='u8':
            name=tk[j+1]; j+=2; sub=None; elem=None
        elif tk[j] in('struct','union'):
            if tk[j+1]=='{' or tk[j+2]=='{':
                k=j+1 if tk[j+1]=='{' else j+2
                e=block(k,tk); fl,elem=members(tk[j],tk[k+1:e-1]); sub=('anon',fl); j=e
                if tk[j]==';': name=None
                else: name=tk[j]; j+=1
            else:
                sub=tk[j+1]; name=tk[j+2]; j+=3; elem=layout(sub)[1]
        else: raise Exception('bad token %r'%tk[j:j+5])
        dims=[]
        while tk[j]=='[':
            if tk[j+1]==']': dims.append(0); j+=2
            else: dims.append(val(tk[j+1])); j+=3
        assert tk[j]==';',tk[j:j+4]; j+=1
        if sub is None:
            elem=dims[-1]; dims=dims[:-1]
        cnt=1
        for d in dims: cnt*=d
        tot=elem*cnt
        flex = bool(dims) and cnt==0
        o = off if kind=='struct' else 0
        if name is None:  # anonymous union/struct: fields flattened
            for f in sub[1]: out.append((f[0],o+f[1])+f[2:])
        else:
            out.append((name,o,tot,elem,cnt if dims else 1,sub if isinstance(sub,str) else None, flex))
        if kind=='struct': off+=tot
        else: size=max(size,tot)
    return out,(off if kind=='struct' else size)
memo={}
def layout(name):
    if not name.startswith('mlx5_ifc_'): name='mlx5_ifc_%s_bits'%name
    if name not in memo:
        k,tk=defs[name]; memo[name]=members(k,tk)
    return memo[name]
if __name__=='__main__':
    bad=[]
    for n in defs:
        try: layout(n)
        except Exception as e: bad.append((n,str(e)[:100]))
    print(len(defs),bad)
    for n in sys.argv[1:]:
        fl,sz=layout(n); print(n,hex(sz))
        for f in fl: print('  %-40s off=%#x tot=%#x elem=%#x cnt=%d sub=%s flex=%s'%f)

WANT='''enable_hca_in enable_hca_out disable_hca_in disable_hca_out query_issi_in query_issi_out set_issi_in set_issi_out
query_pages_in query_pages_out manage_pages_in manage_pages_out query_hca_cap_in query_hca_cap_out set_hca_cap_in set_hca_cap_out cmd_hca_cap roce_cap
access_register_in access_register_out register_host_endianness paos_reg init_hca_in init_hca_out teardown_hca_in teardown_hca_out
modify_nic_vport_context_in modify_nic_vport_context_out modify_nic_vport_field_select nic_vport_context mac_address_layout query_nic_vport_context_in query_nic_vport_context_out
alloc_uar_in alloc_uar_out dealloc_uar_in dealloc_uar_out create_eq_in create_eq_out destroy_eq_in destroy_eq_out eqc alloc_pd_in alloc_pd_out dealloc_pd_in dealloc_pd_out
create_mkey_in create_mkey_out destroy_mkey_in destroy_mkey_out mkc create_cq_in create_cq_out destroy_cq_in destroy_cq_out cqc
create_qp_in create_qp_out destroy_qp_in destroy_qp_out qpc ads rst2init_qp_in rst2init_qp_out init2rtr_qp_in init2rtr_qp_out rtr2rts_qp_in rtr2rts_qp_out qp_2err_in qp_2err_out query_qp_in query_qp_out
set_roce_address_in set_roce_address_out query_roce_address_in query_roce_address_out roce_addr_layout query_vport_state_in query_vport_state_out query_special_contexts_in query_special_contexts_out
qp_2rst_in qp_2rst_out init2init_qp_in init2init_qp_out rts2rts_qp_in rts2rts_qp_out pmtu_reg
alloc_q_counter_in alloc_q_counter_out dealloc_q_counter_in dealloc_q_counter_out query_q_counter_in query_q_counter_out
query_cong_statistics_in query_cong_statistics_out query_vport_counter_in query_vport_counter_out traffic_counter'''.split()
